"""The allreduce benchmark's CSV (detcoll_allreduce_perf -C) and its plots (scripts/plot_bench.py).

Two runs at np 3 on four small sizes append to one CSV (float32 ordered beside MPI_Allreduce,
float16 invariant beside detcoll's native mode): one header, a row per size and run with the
columns of the printed table, values consistent with each other (algbw from bytes and time, busbw
= algbw * 2(P-1)/P, ratio = ours / peer busbw) and no wrong element. Nothing here depends on how
fast anything ran. plot_bench.py draws a valid PNG per mode; without matplotlib it says which
Debian package to install. A CSV file with another benchmark's columns is refused.
"""

import csv
import os
import shutil
import subprocess

import pytest

PERF = os.environ.get("DETCOLL_ALLREDUCE_PERF")
MPIEXEC = os.environ.get("DETCOLL_MPIEXEC") or shutil.which("mpirun")
PLOT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "plot_bench.py")
NP = 3
SIZES = [64, 256, 1024, 4096]  # -b 64 -e 4K -f 4
RUNS = [("float", "ordered", "float32", 4, "MPI_Allreduce"),
        ("half", "invariant", "float16", 2, "detcoll-native")]
COLUMNS = ["dtype", "op", "mode", "ranks", "bytes", "count", "ours_us", "ours_algbw",
           "ours_busbw", "wrong", "peer_name", "peer_us", "peer_algbw", "peer_busbw", "ratio"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

pytestmark = pytest.mark.skipif(
    not PERF or not MPIEXEC, reason="needs DETCOLL_ALLREDUCE_PERF and mpirun (run through ctest)")


def perf(np, csv_path, *args):
    return subprocess.run([MPIEXEC, "-np", str(np), "--oversubscribe", PERF, "-b", "64", "-e",
                           "4K", "-f", "4", "-n", "3", "-w", "1", "-C", csv_path, *args],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The CSV of the two runs, and their printed tables."""
    path = str(tmp_path_factory.mktemp("bench") / "allreduce.csv")
    tables = []
    for dtype, mode, _, _, _ in RUNS:
        result = perf(NP, path, "-d", dtype, "-m", mode)
        assert result.returncode == 0, result.stdout + result.stderr
        tables.append(result.stdout)
    return path, tables


def test_one_header_and_a_row_per_size_and_run(runs):
    path, tables = runs
    with open(path, newline="") as f:
        lines = list(csv.reader(f))
    assert lines[0] == COLUMNS
    assert COLUMNS not in lines[1:], "the second run wrote the header again"
    assert len(lines) == 1 + len(SIZES) * len(RUNS)
    assert all(len(line) == len(COLUMNS) for line in lines)
    # The printed table keeps its rows: one per size, and the average line.
    for table in tables:
        body = [line for line in table.splitlines() if line and not line.startswith("#")]
        assert len(body) == len(SIZES), table
        assert "# Avg bus bandwidth" in table


def test_rows_agree_with_the_runs_and_each_other(runs):
    path, _ = runs
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for i, (_, mode, dtype, size, peer) in enumerate(RUNS):
        mine = rows[i * len(SIZES):(i + 1) * len(SIZES)]
        assert [int(r["bytes"]) for r in mine] == SIZES
        for r in mine:
            assert (r["dtype"], r["op"], r["mode"], r["ranks"], r["peer_name"]) == (
                dtype, "sum", mode, str(NP), peer)
            assert int(r["count"]) * size == int(r["bytes"])
            assert int(r["wrong"]) == 0
            for side in ("ours", "peer"):
                us, algbw, busbw = (float(r[f"{side}_{c}"]) for c in ("us", "algbw", "busbw"))
                assert us > 0
                # Six significant digits each: equal within rounding.
                assert algbw == pytest.approx(int(r["bytes"]) / us / 1e3, rel=1e-4)
                assert busbw == pytest.approx(algbw * 2 * (NP - 1) / NP, rel=1e-4)
            ratio = float(r["ours_busbw"]) / float(r["peer_busbw"])
            assert float(r["ratio"]) == pytest.approx(ratio, rel=1e-4)


def test_plots_are_pngs(runs, tmp_path):
    path, _ = runs
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        pytest.skip("python3-matplotlib is not installed (scripts/setup.sh installs it)")
    result = subprocess.run(["/usr/bin/python3", PLOT, path, str(tmp_path / "plots")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    expected = [str(tmp_path / "plots" / f"allreduce_{mode}_sum_np{NP}.png")
                for mode in ("ordered", "invariant")]
    assert result.stdout.split() == expected
    for png in expected:
        with open(png, "rb") as f:
            data = f.read()
        assert len(data) > len(PNG_MAGIC) and data.startswith(PNG_MAGIC), png


def test_plot_without_matplotlib_names_the_package(runs, tmp_path):
    path, _ = runs
    fake = tmp_path / "site" / "matplotlib"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    result = subprocess.run(["/usr/bin/python3", PLOT, path, str(tmp_path / "plots")],
                            capture_output=True, text=True, timeout=60,
                            env=dict(os.environ, PYTHONPATH=str(tmp_path / "site")))
    assert result.returncode != 0
    assert "python3-matplotlib" in result.stderr, result.stderr
    assert not (tmp_path / "plots").exists()


def test_a_csv_of_other_columns_is_refused(tmp_path):
    other = tmp_path / "fusion.csv"
    other.write_text("mode,ranks,threshold\nordered,2,67108864\n")
    result = perf(1, str(other))
    assert result.returncode != 0
    assert "has other columns" in result.stderr, result.stderr
    assert other.read_text() == "mode,ranks,threshold\nordered,2,67108864\n"
