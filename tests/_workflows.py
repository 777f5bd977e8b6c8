"""Running the workflow from a test: one snakemake runner for the workflow fixtures."""

from __future__ import annotations


def run_workflow(root, config: dict, targets: list[str], *, timeout: int = 900) -> None:
    """``snakemake --cores 2`` of ``config`` in ``root`` up to ``targets``; fails loudly."""
    import subprocess
    import sys

    import yaml
    from test_snakemake import ROOT

    (root / "config.yaml").write_text(yaml.safe_dump(config))
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"),
         "--cores", "2", "--configfile", str(root / "config.yaml"), "--directory", str(root),
         *targets],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
