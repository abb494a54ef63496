"""issue 48: A2D's attention term pulls as hard whatever the batch's shape (flat form), where the
released reduction's pull grows with sentences per batch and shrinks with sentence length.
Measured as bench/a2d_gradient_share.py does, on tiny random models and synthetic batches."""
import os
import sys

import pytest

from helpers import REPO

sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "bench"))
from bench import a2d_gradient_share as share  # noqa: E402

FORMS = {name: share.FORMS[name] for name in ("flat", "reference")}


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    work = str(tmp_path_factory.mktemp("share"))
    teacher = share.Spec(share.model_flags(2, 32, 64, 4, 0.0))
    return {length: share.synthetic(work, f"len{length}", 300, 32, length, teacher, sigma=0.0) for length in (8, 16)}


def shares_at(corpora, length, sentences):
    data, teacher = corpora[length]
    rows = share.measure(data, teacher, share.model_flags(1, 32, 64, 4, 0.0), 100000, sentences=sentences, forms=FORMS)
    return {name: row["all"] for name, row in rows.items()}


def test_the_flat_forms_gradient_share_does_not_depend_on_the_batch_shape(corpora):
    base = shares_at(corpora, 8, 16)
    twice_the_sentences = shares_at(corpora, 8, 32)
    twice_as_long = shares_at(corpora, 16, 16)
    # the released reduction: a sum over sentences (twice the pull) and over O(1/n²) cells
    assert 1.7 < twice_the_sentences["reference"] / base["reference"] < 2.3
    assert twice_as_long["reference"] / base["reference"] < 0.5
    # the flat form: a mean over sentences and maps, n² times each map's KL
    assert 0.9 < twice_the_sentences["flat"] / base["flat"] < 1.1
    assert 0.67 < twice_as_long["flat"] / base["flat"] < 1.5


def test_smoke_run_writes_both_results(tmp_path):
    share.main(["--smoke", "--out", str(tmp_path)])
    import json

    result = json.load(open(tmp_path / "a2d_gradient_share.json"))
    assert result["flat_scale"] == pytest.approx(6.7)
    assert {"reference", "flat", "rowwise"} <= set(result["rows"][0]["forms"])
    assert "gradient share" in (tmp_path / "a2d_gradient_share.md").read_text()


def test_clamp_measurement_runs_and_reports_fractions(corpora):
    data, teacher = corpora[8]
    points = share.clamp_during_training(data, teacher, share.model_flags(1, 32, 64, 4, 0.0), 4)
    assert [p["updates"] for p in points] == [0, 2, 4]
    for p in points:
        assert 0.0 <= p["dead_cells"] <= 1.0 and 0.0 <= p["teacher_mass_on_dead_cells"] <= 1.0
