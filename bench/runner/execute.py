"""Running a recipe: the plan's argv lists, step by step, with caching and resumption.

A step is done if its directory holds a record, or, when asked (``reuse``), if committed
results hold a row with the same step name and key; a done step is rerun only when a step
that must run needs its files (a teacher checkpoint, seq-KD data). An interrupted training
run resumes: fairseq-train continues from ``checkpoint_last.pt`` in the same directory.
Every command runs through the runner's own interpreter (so it needs no PATH), its whole
output appended to the step's log file (``step.log`` in its directory).
"""
import os
import shlex
import signal
import subprocess
import sys
import time
from typing import Dict, List, Optional

from fairseq_distill.quiet import SHOW_ENV

from .config import dependencies
from .schema import load_checked
from .host import HEAP_MALLOC
from .plan import REPO, Plan
from .progress import CountProgress, Terminal, TrainingProgress, duration
from . import records
from .records import run_fingerprint, stale_evaluation
from .schema import check_train_flags
from .results import write_results

# the installed tools a plan names, and the modules they are started from
TOOL_MODULES = {
    "fairseq-train": "fairseq_cli.train",
    "fsd-prepare-corpus": "fairseq_distill.cli.prepare_corpus",
    "fsd-extract-student": "fairseq_distill.cli.extract_student",
    "fsd-export-student": "fairseq_distill.cli.export_student",
    "fsd-evaluate": "fairseq_distill.cli.evaluate",
    "fsd-seqkd": "fairseq_distill.cli.seqkd",
    "fsd-cache-teacher": "fairseq_distill.cli.cache_teacher",
    "fsd-export-ctranslate2": "fairseq_distill.cli.export_ctranslate2",
}
LOG_NAME = "step.log"
# steps that make data from a teacher: what they do, their record, the summary of their record
TEACHER_OUTPUTS = {
    "seqkd": ("the teacher translates the training set", records.seqkd_record,
              lambda r: f"{r['kept']:,} sentence pairs"),
    "cache": ("the teacher's top-k outputs over the training set", records.cache_record,
              lambda r: f"{r['tokens']:,} target tokens, {r['bytes'] / 1e6:.1f} MB"),
}


class StepFailed(Exception):
    def __init__(self, label: str, argv: List[str], code: int, log_path: str):
        super().__init__(f"{label}: {argv[0]} failed (exit status {code})")
        self.log_path = log_path


def runnable(argv: List[str]) -> List[str]:
    return [sys.executable, "-m", TOOL_MODULES[argv[0]], *argv[1:]]


def tool_env(argv: List[str]) -> Dict[str, str]:
    """The environment a planned tool runs in."""
    return {**(HEAP_MALLOC if argv[0] == "fairseq-train" else {}), **os.environ,
            # a pipe would otherwise hold the tools' progress back for minutes
            "PYTHONUNBUFFERED": "1",
            # the step's log keeps the library warnings the plugin otherwise silences
            SHOW_ENV: "1"}


def run_tool(argv: List[str], label: str, log_path: str, on_line=None) -> None:
    """Run one planned argv list, its output appended to ``log_path`` (and each line passed to
    ``on_line``). Training runs get the heap set-up of :data:`host.HEAP_MALLOC`."""
    env = tool_env(argv)
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"$ {shlex.join(argv)}\n# run as: {shlex.join(runnable(argv))}\n")
        log.flush()
        proc = subprocess.Popen(runnable(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                encoding="utf-8", errors="replace", env=env)
        try:
            for line in proc.stdout:
                log.write(line)
                log.flush()
                if on_line:
                    on_line(line)
            code = proc.wait()
        except BaseException:
            # stopped (Ctrl-C, or SIGTERM via stop_children_on_sigterm): without its reader a
            # training would run on unseen, its log lines failing on the closed pipe
            stop(proc)
            raise
    if code != 0:
        raise StepFailed(label, argv, code, log_path)


def stop(proc: subprocess.Popen, grace_seconds: float = 30) -> None:
    """Terminate a tool and reap it; killed if it does not end within ``grace_seconds``."""
    proc.terminate()
    try:
        proc.wait(timeout=grace_seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def stop_children_on_sigterm() -> None:
    """Make SIGTERM (``kill RUNNER``) unwind like Ctrl-C, so that the running tool is stopped
    too (Python's default for SIGTERM ends the process at once, leaving its child running)."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


class Runner:
    """A recipe's plan, its finished steps (``done``: step name -> record) and how to run the rest."""

    def __init__(self, config: str, workdir: str, results: Optional[str] = None, only=None, reuse=(),
                 terminal: Optional[Terminal] = None):
        self.path = config
        self.cfg = load_checked(config)
        self.plan = Plan(self.cfg, config, workdir)
        check_train_flags(self.plan)
        self.name, self.workdir, self.keys = self.plan.name, self.plan.workdir, self.plan.keys
        self.data_bin = self.plan.data_bin
        self.results_dir = results
        self.only = only
        self.reuse = list(reuse or ())  # results JSON files whose rows count as done
        self.terminal = terminal or Terminal()
        self.done: Dict[str, dict] = {}

    # -- what the analyses use ------------------------------------------------------------

    def step_dir(self, step) -> str:
        return self.plan.step_dir(step)

    def train_options(self, step, save_dir=None) -> dict:
        return self.plan.train_options(step, save_dir)

    def trained_runs(self) -> List[str]:
        """Names of the finished training steps, in recipe order."""
        return [s["name"] for s in self.cfg["steps"] if self.done.get(s["name"], {}).get("kind") == "train"]

    def load_finished(self) -> None:
        """Pick up every finished step in the work dir, running nothing."""
        self.done = records.local_records(self.plan)

    # -- printing and running ---------------------------------------------------------------

    def print_commands(self) -> None:
        """Print every selected step as shell commands, running nothing: the recipe as a
        script that stock fairseq plus this package's tools would run by hand."""
        print(f"# {self.path}: each step as it runs on its first launch")
        print(shlex.join(self.plan.prepare_command()))
        for step in self.plan.selected_steps(self.only):
            print(f"\n# step {step['name']}")
            for argv in self.plan.commands(step):
                print(shlex.join(argv))

    def say(self, text: str) -> None:
        self.terminal.say(text)

    def prepare_data(self) -> None:
        argv = self.plan.prepare_command()
        log_path = self.plan.data_dir + ".log"
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        ready = os.path.isdir(self.plan.data_bin)
        started = time.time()
        if not ready:
            self.say(f"[data] preparing {self.plan.data_dir} (log: {log_path})")
        run_tool(argv, "data", log_path)
        if not ready:
            self.say(f"[data] prepared in {duration(time.time() - started)}")

    def run(self) -> List[dict]:
        """Run what is missing, write the results, and return the rows."""
        plan = self.plan
        selected = plan.selected_steps(self.only)
        names = {s["name"] for s in selected}
        self.say(f"recipe {self.name}: {len(selected)} steps in {self.workdir} "
                 f"(each step's full output: {LOG_NAME} in its directory)")
        self.prepare_data()
        local = records.local_records(plan)
        committed = {n: r for n, r in records.committed_rows(self.reuse, plan.keys, plan.name).items()
                     if not stale_evaluation(r, plan.evaluated_checkpoint)}
        number = {s["name"]: i for i, s in enumerate(selected, 1)}
        must_run = {n for n in names if n not in local and n not in committed}
        for step in reversed(plan.steps):  # a step that runs needs its dependencies' files here
            if step["name"] in must_run:
                must_run.update(d for d in dependencies(step) if d not in local)
        # finished steps keep their rows in the results written after each step too, those not
        # selected and those the loop below reaches only later (a committed row after a step that
        # runs first: without it, that write would drop the row and its test output)
        for step in plan.steps:
            name = step["name"]
            if name in local or (name in committed and (name not in names or name not in must_run)):
                self.done[name] = local.get(name) or committed[name]
        for step in plan.steps:
            name = step["name"]
            if name not in names:
                continue
            label = f"[{number[name]}/{len(selected)}] {name}"
            if name in local:
                if stale_evaluation(local[name], plan.evaluated_checkpoint):
                    local[name] = self.reevaluate(step, local[name], label)
                self.done[name] = local[name]
                self.say(f"{label}: cached ({plan.step_dir(step)})")
                continue
            if name not in must_run:
                self.done[name] = committed[name]
                self.say(f"{label}: taken from the committed results (key {plan.keys[name]})")
                continue
            record = self.run_step(step, label)
            if name in committed:
                # rerun only for its files: say whether it reproduced the committed result
                before, after = committed[name].get("bleu"), record.get("bleu")
                record["reproduces_committed"] = before == after
                record["committed_bleu"] = before
                if before != after:
                    self.say(f"WARNING: {name} reran with BLEU {after}, the committed results say "
                             f"{before}; rows from the two runs do not share this step")
            records.save(plan, step, record)
            self.done[name] = record
            self.write_results()  # a long benchmark keeps what it has finished
        table = self.write_results()
        self.say("\n" + table + "\n")
        self.say_where()
        return [r for r in self.done.values() if r["kind"] == "train"]

    def write_results(self) -> str:
        done = {s["name"]: self.done[s["name"]] for s in self.cfg["steps"] if s["name"] in self.done}  # recipe order
        return write_results(self.results_dir, self.name, self.path, self.plan.evaluated_checkpoint,
                             self.cfg["steps"], done, self.cfg.get("compare"), self.cfg.get("seed", 1),
                             keep_dir=os.path.join(self.workdir, "paired-tests"))

    def say_where(self) -> None:
        trained = [(n, r["checkpoint"]) for n, r in self.done.items() if r["kind"] == "train"]
        # rows taken from the committed results name a checkpoint of the machine that made them
        here = [(n, path) for n, path in trained if os.path.isfile(path)]
        if here:
            self.say('decoding checkpoints (a plugin architecture decodes with --user-dir "$(fsd-options --user-dir)"):')
            for name, path in here:
                self.say(f"  {name}: {os.path.relpath(path) if path.startswith(REPO) else path}")
        elsewhere = [n for n, path in trained if not os.path.isfile(path)]
        if elsewhere:
            self.say(f"no checkpoint here (rows taken from the committed results): {', '.join(elsewhere)}")
        if self.results_dir:
            self.say(f"results: {os.path.join(self.results_dir, self.name)}.json and .md")

    def run_step(self, step, label: str) -> dict:
        plan = self.plan
        stepdir = plan.step_dir(step)
        os.makedirs(stepdir, exist_ok=True)
        log_path = os.path.join(stepdir, LOG_NAME)
        started = time.time()
        kind = next((k for k in TEACHER_OUTPUTS if k in step), None)
        if "pretrained" in step:
            commands = []
            record = records.pretrained_record(plan, step)
            self.say(f"{label}: the pretrained model {step['pretrained']} (SHA-256 {record['sha256'][:12]}…)")
        elif kind:
            what, make_record, summary = TEACHER_OUTPUTS[kind]
            commands = plan.commands(step)
            self.say(f"{label}: {what} (log: {log_path})")
            for argv in commands:
                run_tool(argv, label, log_path, CountProgress(self.terminal, label))
            record = make_record(plan, step, time.time() - started)
            self.say(f"{label}: done in {duration(time.time() - started)}: {summary(record)}")
        else:
            first_launch = plan.is_first_launch(step)
            commands = plan.commands(step, first_launch)
            options = plan.train_options(step)
            budget = (f"{options['max-epoch']} epochs" if options.get("max-epoch")
                      else f"{options['max-update']} updates" if options.get("max-update") else "")
            how = "training" if first_launch else "resuming its training from checkpoint_last.pt"
            self.say(f"{label}: {how}{', ' + budget if budget else ''} (log: {log_path})")
            for argv in commands:
                follow = (TrainingProgress(self.terminal, label, options.get("max-epoch"))
                          if argv[0] == "fairseq-train" else CountProgress(self.terminal, label))
                run_tool(argv, label, log_path, follow)
            record = records.training_record(plan, step)
            self.say(f"{label}: done in {duration(time.time() - started)}: BLEU {record['bleu']:.2f}, "
                     f"{record['tokens_per_second']:.0f} tokens/s")
        record.update({"name": step["name"], "key": plan.keys[step["name"]], "run": run_fingerprint(record),
                       # which runs of its dependencies this one was made from
                       "uses": records.uses(dependencies(step), self.done),
                       # the argv lists this session ran to finish the step
                       "commands": commands})
        return record

    def reevaluate(self, step, record, label) -> dict:
        """A finished run's record for the checkpoint the recipe now evaluates. Re-exported and
        re-evaluated only if that checkpoint holds another model (best and last are often the
        same update); the run is not retrained, and its run fingerprint follows the export."""
        plan = self.plan
        which = plan.evaluated_checkpoint
        if records.evaluated_updates(plan, step) == record["updates"]:
            record = {**record, "evaluated_checkpoint": which}
        else:
            self.say(f"{label}: evaluating checkpoint_{which}.pt (its record evaluated "
                     f"checkpoint_{record.get('evaluated_checkpoint', 'best')}.pt)")
            commands = plan.evaluation_commands(step)
            for argv in commands:
                run_tool(argv, label, os.path.join(plan.step_dir(step), LOG_NAME))
            fresh = records.training_record(plan, step)
            record = {**record, **fresh, "run": run_fingerprint(fresh),
                      "commands": record.get("commands", []) + commands}
        records.save(plan, step, record)
        return record


def finished_recipe(config: str, workdir=None) -> Runner:
    """A recipe with its finished steps loaded and nothing run (for analysis and benchmarks);
    ``workdir`` defaults to the runner's, ``work/<config name>``."""
    name = os.path.splitext(os.path.basename(config))[0]
    recipe = Runner(config, workdir or os.path.join(REPO, "work", name))
    recipe.load_finished()
    return recipe
