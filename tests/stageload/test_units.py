"""The one size parser and byte formatter (meshfacts.units), and that every place that reads or
shows a size uses them: the guard's options, the runner's --keep-resident (as the runner refuses
it: a usage error, exit 2), stageload.pixal3d's --keep-resident, and the summary's text."""
import ast
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from meshfacts.units import MAX_SIZE, format_percent, format_size, parse_size

ROOT = Path(__file__).resolve().parents[2]
GIB = 1024**3
MIB = 1024**2
#: how a hand-made size helper spells its multiples (as ast.unparse writes them)
MULTIPLE_SPELLINGS = ("1024", "1 << 10", "1 << 20", "1 << 30", "1000000000.0", "10 ** 9", "1e9")


@pytest.mark.parametrize("text, expected", [
    ("18G", 18 * GIB), ("18GB", 18 * GIB), ("18GiB", 18 * GIB), ("512M", 512 * MIB),
    ("1.5g", int(1.5 * GIB)), ("1048576", 1048576), ("4k", 4096), ("2T", 2 * 1024**4),
    (" 40B ", 40), (".5K", 512), (0, 0), (123, 123),
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "G", "-1G", "18X", "1.2.3G", "ten", "nan", "inf", "1e9",
                                  "18 P", True, None, "\udcff"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError, match="not a size"):
        parse_size(text)


@pytest.mark.parametrize("text", ["9" * 400, "8388608T", 2**63, "9" * 30 + "G"])
def test_parse_size_refuses_figures_larger_than_any_memory(text):
    with pytest.raises(ValueError, match="larger than any memory"):
        parse_size(text)
    assert parse_size(MAX_SIZE) == MAX_SIZE


def test_parse_size_negative_int_says_so():
    with pytest.raises(ValueError, match="cannot be negative"):
        parse_size(-1)
    with pytest.raises(ValueError, match="cannot be negative"):
        parse_size("-1G")


def test_parse_size_with_required_unit():
    assert parse_size("40B", require_unit=True) == 40
    assert parse_size("0", require_unit=True) == 0
    assert parse_size("2G", require_unit=True) == 2 * GIB
    with pytest.raises(ValueError, match="has no unit; write 40G, 40M or 40B"):
        parse_size("40", require_unit=True)


def test_format_size_labels_binary_multiples():
    assert format_size(383 * MIB) == "383.0 MiB"
    assert format_size(int(1.5 * GIB)) == "1.5 GiB"
    assert format_size(2048) == "2.0 KiB" and format_size(5) == "5 B" and format_size(0) == "0 B"
    assert format_size(-2 * MIB) == "-2.0 MiB"
    assert format_size(5 * 1024**5) == "5120.0 TiB"
    # just under 1 GiB rounds to 1024.0 MiB at one decimal: shown as the next unit instead
    assert format_size(GIB - 1) == "1.0 GiB"


def test_format_size_in_a_fixed_unit_for_tables():
    assert format_size(int(0.32e9), unit="GiB", digits=2) == "0.30 GiB"
    assert format_size(3 * GIB, unit="GiB", digits=2) == "3.00 GiB"
    assert format_size(512 * MIB, unit="MiB", digits=0) == "512 MiB"
    assert format_size(None, "—", unit="GiB") == "—"
    assert format_size(int(1.25 * GIB), digits=2) == "1.25 GiB"
    with pytest.raises(ValueError, match="not one of KiB, MiB, GiB, TiB"):
        format_size(1, unit="GB")


def test_format_size_unknown():
    assert format_size(None) == "?" and format_size(None, unknown="–") == "–"
    assert format_size(math.nan) == "?" and format_size(math.inf, unknown="unknown") == "unknown"


def test_format_and_parse_round_trip():
    for n in (1536, 383 * MIB, 44 * GIB + 200 * MIB):
        shown = format_size(n)
        assert abs(parse_size(shown.replace(" ", "")) - n) <= 0.05 * n, shown


def test_format_percent():
    assert format_percent(7, 100) == "7 %" and format_percent(None, 100) == "?"
    assert format_percent(1, 0) == "?"


def _calls_to(module: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names |= {a.name for a in node.names
                      if node.module.endswith("units")
                      or (a.name == "units" and node.module == "meshfacts")}
    return names


@pytest.mark.parametrize("path", ["stageload/pixal3d/options.py", "stageload/pixal3d/__main__.py",
                                  "stageload/summary.py", "stageload/plot.py",
                                  "stageload/guard/config.py", "stageload/guard/amount.py",
                                  "stageload/pixal3d/export/run.py"])
def test_every_size_reader_and_writer_uses_the_one_units_module(path):
    """Each place that reads or shows sizes imports the parser or the formatter."""
    assert _calls_to(ROOT / path) & {"parse_size", "format_size", "units"}, path


def test_no_other_size_helper_keeps_its_own_multiples():
    """No module of the product defines its own size helper (a second copy drifts)."""
    helpers = {"parse_size", "format_size", "gb", "_bytes", "_size"}
    own = [str(p.relative_to(ROOT))
           for pkg in ("runner", "stageload", "bounded_export", "meshfacts")
           for p in (ROOT / pkg).rglob("*.py")
           if p.name != "units.py" and any(
               isinstance(n, ast.FunctionDef) and n.name in helpers
               and any(m in ast.unparse(n) for m in MULTIPLE_SPELLINGS)
               for n in ast.walk(ast.parse(p.read_text())))]
    assert own == []


def test_runner_keep_resident_refuses_a_size_as_usage(tmp_path):
    """The runner's check refuses a bad --keep-resident with the parser's message, exit 2."""
    done = subprocess.run([sys.executable, "-m", "runner", "check", "--backend", "pixal3d",
                           "--keep-resident", "12 parsecs"], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    errors = [e for e in lines if e.get("event") == "error"]
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert errors and errors[0]["kind"] == "usage"
    assert "'12 parsecs' is not a size" in errors[0]["message"]
