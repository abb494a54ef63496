"""The options of a criterion, task or architecture, with their defaults, and where the plugin is.

    fsd-options ckd                 # --criterion ckd's options (--kd-*, --layer-*, --ckd-*)
    fsd-options translation_distill # --task translation_distill's (--teacher-path, --teacher-cache, ...)
    fsd-options deep_transformer    # an architecture's
    fsd-options --user-dir          # the installed plugin's folder, for --user-dir from any directory

``fairseq-train ... --criterion ckd --help`` cannot list them: fairseq prints its help at its
first parse, before it has read --criterion. The plugin's folder is printed as one line, so that

    fairseq-train DATA --user-dir "$(fsd-options --user-dir)" --task translation_distill ...

works from any directory (``--user-dir fairseq_distill`` only from the checkout, or where fairseq
and the plugin sit side by side in site-packages).
"""
import argparse
import os

from fairseq_distill.cli.common import cli_parser, first_paragraph, run_cli, HelpFormatter
from fairseq_distill.errors import DistillError

PLUGIN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def registries():
    """(kind, option, registry) for each kind of name fairseq looks up, with the plugin registered."""
    import fairseq_distill  # noqa: F401  (registers the plugin's criterions, tasks and models)
    from fairseq.criterions import CRITERION_DATACLASS_REGISTRY
    from fairseq.models import ARCH_MODEL_REGISTRY
    from fairseq.tasks import TASK_DATACLASS_REGISTRY

    return (("criterion", "--criterion", CRITERION_DATACLASS_REGISTRY),
            ("task", "--task", TASK_DATACLASS_REGISTRY),
            ("architecture", "--arch", ARCH_MODEL_REGISTRY))


def plugin_names():
    """The names this plugin registers, by kind."""
    found = {}
    for kind, _, registry in registries():
        for name, value in registry.items():
            module = getattr(value, "__module__", "")
            if module.startswith("fairseq_distill."):
                found.setdefault(kind, []).append(name)
    return {kind: sorted(names) for kind, names in found.items()}


def options_help(name: str) -> str:
    """The ``--help`` text of ``name``'s options, as fairseq-train would take them."""
    from fairseq.dataclass.utils import gen_parser_from_dataclass

    for kind, option, registry in registries():
        if name not in registry:
            continue
        entry = registry[name]
        doc = entry.__doc__ or ""
        if doc.startswith(f"{entry.__name__}("):  # a dataclass's generated signature, not a description
            doc = ""
        parser = argparse.ArgumentParser(prog=f"fairseq-train ... {option} {name}", add_help=False,
                                         formatter_class=HelpFormatter, usage=argparse.SUPPRESS,
                                         description=first_paragraph(doc) or None)
        if kind == "architecture":
            if getattr(entry, "__dataclass", None) is not None:
                gen_parser_from_dataclass(parser, entry.__dataclass())
            else:
                entry.add_args(parser)
        else:
            gen_parser_from_dataclass(parser, entry())
        return f"{option} {name} ({kind}, {entry.__module__}): its options\n\n" + parser.format_help()
    listed = "; ".join(f"{kind}: {', '.join(names)}" for kind, names in plugin_names().items())
    raise DistillError(f"'{name}' is no criterion, task or architecture that fairseq knows with the plugin "
                       f"loaded; the plugin's are {listed}")


def main(argv=None):
    p = cli_parser(__doc__)
    p.add_argument("names", nargs="*", metavar="NAME", help="criterion, task or architecture names")
    p.add_argument("--user-dir", action="store_true", help="print the plugin's folder, for --user-dir")
    args = p.parse_args(argv)
    if args.user_dir:
        print(PLUGIN_DIR)
        return
    if not args.names:
        listed = "\n".join(f"  {kind}: {', '.join(names)}" for kind, names in plugin_names().items())
        print(f"the plugin's names (fsd-options NAME lists one's options):\n{listed}")
        return
    print("\n".join(run_cli("options", lambda: [options_help(n) for n in args.names])))


if __name__ == "__main__":
    main()
