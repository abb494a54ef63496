"""fsd-translate's streaming: a window of lines at a time, outputs in input order, line numbers of
the whole stream (a stand-in translator and segmenter: the windows are what is under test)."""
from fairseq_distill.deploy.translators import translate_lines, translate_stream


class Words:
    """Segments at spaces and joins back."""

    def encode(self, line):
        return line.split()

    def decode(self, pieces):
        return " ".join(pieces)


class Reverser:
    """'Translates' by reversing the words; takes at most 3 of them."""

    name = "reverser"
    max_source_tokens = 3

    def __init__(self):
        self.batches = []

    def translate(self, batch):
        self.batches.append(len(batch))
        return [list(reversed(pieces)) for pieces in batch]


def test_windows_give_the_whole_runs_output_in_order_with_stream_line_numbers():
    lines = ["a b", "", "c d e f", "g", "h i j", "  ", "k l m n o", "p"]
    whole = translate_lines(lines, Reverser(), Words(), batch_size=2, progress=False)
    written = []
    translator = Reverser()
    run = translate_stream(iter(lines), translator, Words(), written.append, batch_size=2, progress=False,
                           window=3)
    text = "".join(written)
    assert text == "b a\n\ne d c\ng\nj i h\n\nm l k\np\n"
    assert text.split("\n")[:-1] == whole.outputs
    # three windows (3 + 3 + 2 lines), each written whole, in order
    assert len(written) == 3 and written[0] == "b a\n\ne d c\n"
    # lines 3 and 7 (1-based, of the whole stream) were cut to the model's 3 tokens
    assert run.truncated == [3, 7] == whole.truncated
    assert (run.lines, run.sentences) == (8, 6)
    assert run.generated_tokens == whole.generated_tokens == 2 + 3 + 1 + 3 + 3 + 1 + 6
    # batches never span windows: each window holds two non-empty lines here, one batch of 2 each
    assert translator.batches == [2, 2, 2]
