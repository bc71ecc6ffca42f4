"""hspace's option values as hspace reads and refuses them (`CLI.hs`: `parseISpecString`,
`tryRead`, `parseYesNo`, the checks of `oMaxCpu` and `oSpindleUse`): Haskell's `reads` for
the numbers and hspace's messages, raised as `programs.parser.HtoolsValueError` so that a bad
value prints `Error while parsing command line arguments:` and exits 1 as hspace does (docs/
space.md, "The command"). Apart from programs/space.py, which builds the command line with
them, to keep the program thin (tests/test_layers.py). Imports nothing heavy: building the
parser must stay light (tests/test_cli.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from model.space import Spec


def htools_int(name: str):  # noqa: ANN202
    """An Int option as htools reads it (`tryRead name`: Haskell's `reads`, its messages)."""

    def parse(text: str) -> int:
        from model.backends.text import read_int
        from programs.parser import HtoolsValueError

        try:
            return read_int(text, name)
        except ValueError as e:
            raise HtoolsValueError(str(e)) from None

    return parse


def htools_double(name: str, *, finite: bool = False):  # noqa: ANN202
    """A Double option as htools reads it (`tryRead name`: Haskell's `reads`, so `1e3`,
    `0x10`, `(3)`, `Infinity` and `NaN` parse, `nan` and `inf` do not, with htools' message
    and exit 1). NaN is refused here in one line: no comparison with it means anything
    (`-e NaN` made the exact balance answer 0 steps, 'optimal'), and with `finite` an
    infinity too (a free-disk ratio of Infinity has no capacity)."""

    def parse(text: str) -> float:
        import math

        from model.backends.text import read_double
        from programs.parser import HtoolsValueError

        try:
            v = read_double(text, name)
        except ValueError as e:
            raise HtoolsValueError(str(e)) from None
        if math.isnan(v) or (finite and math.isinf(v)):
            kind = "a finite number" if finite else "a number"
            raise HtoolsValueError(f"{name}: exalloc needs {kind}, not {text}")
        return v

    return parse


def disk_template(text: str) -> str:
    """`--disk-template` as hspace reads it (`diskTemplateFromRaw`): one of Ganeti's template
    names, exactly; another is refused in hspace's words, exit 1 (argparse's `choices` made it
    a usage error, exit 2)."""
    from model.cluster import DISK_TEMPLATES
    from programs.parser import HtoolsValueError

    if text not in DISK_TEMPLATES:
        raise HtoolsValueError(f'Invalid string value for type DiskTemplate: "{text}"')
    return text


def spec_type(descr: str):  # noqa: ANN201
    """`--standard-alloc` / `--tiered-alloc` (CLI.parseISpecString): disk,ram,cpu[,spindles],
    sizes with htools' units; a bad one refused in hspace's words (exit 1)."""

    def parse(text: str) -> Spec:
        from model.backends.simu import parse_unit
        from model.space import Spec
        from programs.parser import HtoolsValueError

        parts = text.split(",")
        if not 3 <= len(parts) <= 4:
            raise HtoolsValueError(
                f"Invalid {descr} specification: '{text}', expected disk,ram,cpu"
            )
        sizes = []
        for name, part in (("disk", parts[0]), ("memory", parts[1])):  # hspace's order
            try:
                sizes.append(parse_unit(part))
            except ValueError as e:
                raise HtoolsValueError(f"{descr} specs {name}: {e}") from None
        disk, ram = sizes
        cpu = htools_int(f"{descr} specs cpus")(parts[2])
        spn = htools_int(f"{descr} specs spindles")(parts[3]) if len(parts) == 4 else 1
        return Spec(ram, disk, cpu, spn)

    return parse


def yes_no(text: str) -> bool:
    """CLI.parseYesNo."""
    from programs.parser import HtoolsValueError

    if text in ("yes", "no"):
        return text == "yes"
    raise HtoolsValueError(f"Invalid choice '{text}', pass one of 'yes' or 'no'")


def max_cpu_ratio(text: str) -> float:
    """--max-cpu (oMaxCpu: `tryRead "parsing max-cpu"`, then > 0). hspace takes Infinity and
    NaN too; exalloc's capacities need a finite ratio, so those get a one-line error."""
    import math

    from model.backends.text import read_double
    from programs.parser import HtoolsValueError

    try:
        v = read_double(text, "parsing max-cpu")
    except ValueError as e:
        raise HtoolsValueError(str(e)) from None
    if math.isinf(v):
        raise HtoolsValueError(f"--max-cpu {text}: exalloc needs a finite ratio")
    if not v > 0:
        raise HtoolsValueError("Invalid value of the max-cpu ratio, expected >0")
    return v


def spindle_use(text: str) -> int:
    """--spindle-use (oSpindleUse: `tryRead "parsing spindle-use"`, then >= 0)."""
    from programs.parser import HtoolsValueError

    v = htools_int("parsing spindle-use")(text)
    if v < 0:
        raise HtoolsValueError("Invalid value of the spindle-use (expected >= 0)")
    return v
