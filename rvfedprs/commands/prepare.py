"""``rvfedprs prepare``: per-client inputs from genotypes (sub-commands ``score`` and ``run``).

``rvfedprs prepare score --genotypes PATH --scorefile FILE [FILE ...] --out FILE.tsv`` writes the
PRS SUM per sample (``sample_id, SUM, n_matched``; with several scores ``<name>_SUM,
<name>_n_matched`` each) and the per-row match log beside it (``FILE.match.tsv``, one section per
score; with ``--match-candidates`` also pgsc_calc's candidate-level log, one row per
scoring-file row × genotype variant, ``not_best`` included, in ``FILE.match_candidates.tsv``);
multi-allelic records skipped in the genotypes are listed in ``FILE.excluded.tsv``. Bad input
(a scoring file without rows, a score nothing matches, a wrong build...) stops it with a
one-line error (exit 2) before anything is written. A VCF/BCF is read through a ``.pgen`` copy
made once by plink2 and kept in a cache (``--pgen-cache``; :mod:`rvfedprs.genotypes.convert`)
when plink2 is installed, else directly with a note on stderr; ``--direct`` reads it directly.

``rvfedprs prepare run`` runs the Snakemake preparation workflow
(:mod:`rvfedprs.commands.prepare_run`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rvfedprs.commands import prepare_run
from rvfedprs.genotypes.convert import DEFAULT_CACHE
from rvfedprs.option_types import COUNT, FRACTION, DefaultsHelpFormatter

HELP = "prepare per-client inputs from genotypes (PRS scoring, rare dosages)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``prepare`` sub-commands."""
    sub = parser.add_subparsers(dest="prepare_command", metavar="SUBCOMMAND", required=True)
    score = sub.add_parser(
        "score",
        help=SCORE_HELP,
        description=SCORE_HELP,
        formatter_class=DefaultsHelpFormatter,
    )
    _add_score_arguments(score)
    score.set_defaults(_prepare_run=_run_score)
    workflow = sub.add_parser("run", help=prepare_run.HELP, description=prepare_run.HELP)
    prepare_run.add_arguments(workflow)
    workflow.set_defaults(_prepare_run=prepare_run.run)


def run(args: argparse.Namespace) -> int:
    """Dispatch to the chosen sub-command."""
    return int(args._prepare_run(args) or 0)


SCORE_HELP = "polygenic score SUM per sample from a PGS Catalog scoring file (plink2 semantics)"


def _add_score_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--genotypes",
        required=True,
        nargs="+",
        metavar="PATH",
        help="PLINK1 prefix or .bed, a VCF/BCF, a .pgen or a .bgen; several = one file per "
        "chromosome",
    )
    parser.add_argument(
        "--scorefile",
        required=True,
        nargs="+",
        metavar="FILE",
        help="PGS Catalog scoring file(s) (.txt[.gz]); several give one SUM column per score",
    )
    parser.add_argument(
        "--keep-ambiguous",
        action="store_true",
        help="score A/T and C/G rows as written instead of dropping them",
    )
    parser.add_argument("--out", required=True, help="output table FILE.tsv")
    parser.add_argument(
        "--match-candidates",
        action="store_true",
        help="also write FILE.match_candidates.tsv, pgsc_calc's candidate-level match log (one "
        "row per scoring-file row and genotype variant paired with it; not_best included)",
    )
    parser.add_argument(
        "--min-overlap",
        type=FRACTION,
        default=0.75,
        help="fewest usable scoring-file rows, as a fraction",
    )
    parser.add_argument(
        "--frequencies",
        default=None,
        help="frequency file for imputing missing dosages (default: the samples')",
    )
    parser.add_argument(
        "--field",
        choices=("auto", "GT", "DS"),
        default="auto",
        help="VCF FORMAT field giving dosages",
    )
    parser.add_argument(
        "--vcf-half-call",
        choices=("haploid", "missing", "error"),
        default="haploid",
        help="a VCF GT half-call (0/., 1/.; 1000 Genomes' male chrX): a haploid call (as "
        "plink2 --vcf-half-call haploid; a hemizygous ALT counts 2, as plink2 --score "
        "counts it), missing, or an error naming the record",
    )
    parser.add_argument(
        "--on-multiallelic",
        choices=("exclude", "error"),
        default="exclude",
        help="a multi-allelic record: skip it (logged, listed in FILE.excluded.tsv) or stop",
    )
    parser.add_argument(  # the former switch, now the default
        "--exclude-multiallelic",
        dest="on_multiallelic",
        action="store_const",
        const="exclude",
        help=argparse.SUPPRESS,
    )
    parser.add_argument(
        "--genome-build",
        default=None,
        help="expected build; the scoring file's #genome_build must agree",
    )
    parser.add_argument(
        "--bgen-ref-allele",
        choices=("first", "last"),
        default="first",
        help="BGEN: which allele of each variant is REF (plink2's ref-first / ref-last)",
    )
    how = parser.add_mutually_exclusive_group()
    how.add_argument(
        "--direct",
        "--no-convert",
        dest="convert",
        action="store_const",
        const="never",
        default=argparse.SUPPRESS,  # "auto"; kept out of the help's "(default: ...)"
        help="read a VCF directly (cyvcf2) instead of the default: with plink2 on the PATH, "
        "each VCF/BCF is converted once to a .pgen copy kept in --pgen-cache for later runs "
        "(several times faster; DS dosages then in plink2's 1/16384 steps, as plink2 --score "
        "reads them); without plink2 it is read directly, with a note on stderr. A BGEN is "
        "read directly either way, which is faster than converting it",
    )
    how.add_argument(
        "--via-pgen",
        dest="convert",
        action="store_const",
        const="always",
        default=argparse.SUPPRESS,
        help="convert VCF and BGEN inputs to .pgen copies (in --pgen-cache), and stop with an "
        "error when plink2 is absent",
    )
    parser.add_argument(
        "--pgen-cache",
        metavar="DIR",
        default=argparse.SUPPRESS,
        help=f"where the .pgen copies go, one per input, named by the input's path, size and "
        f"mtime and replaced when it changes (default: {DEFAULT_CACHE})",
    )
    parser.add_argument("--chunk-size", type=COUNT, default=4096, help="variants read at a time")


def _run_score(args: argparse.Namespace) -> int:
    from contextlib import nullcontext

    from rvfedprs.genotypes import open_genotypes
    from rvfedprs.genotypes.convert import converted, default_cache_dir, name_as_inputs
    from rvfedprs.genotypes.frequencies import read_frequency_file
    from rvfedprs.genotypes.readers import skipped_variants
    from rvfedprs.genotypes.scoring import score
    from rvfedprs.tsv import write_tsv

    freqs = read_frequency_file(args.frequencies) if args.frequencies else None
    formats = _converted_formats(getattr(args, "convert", "auto"), args.genotypes)
    inputs = (
        converted(
            args.genotypes,
            field=args.field,
            bgen_ref_allele=args.bgen_ref_allele,
            half_call=args.vcf_half_call,
            cache_dir=getattr(args, "pgen_cache", None) or default_cache_dir(),
            formats=formats,
        )
        if formats
        else nullcontext(args.genotypes)
    )
    with inputs as paths:
        source = open_genotypes(
            paths,
            field=args.field,
            multiallelic=args.on_multiallelic,
            bgen_ref_allele=args.bgen_ref_allele,
            half_call=args.vcf_half_call,
        )
        source = name_as_inputs(source, args.genotypes, paths)
        scores, log, *candidates = score(
            source,
            args.scorefile,
            frequencies=freqs,
            keep_ambiguous=args.keep_ambiguous,
            min_overlap=args.min_overlap,
            chunk_size=args.chunk_size,
            genome_build=args.genome_build,
            return_candidates=args.match_candidates,
        )
        skipped = skipped_variants(source)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    stem = out.name.removesuffix(".tsv")
    match_path = out.with_name(stem + ".match.tsv")
    tables = [(scores, out, "%.10g"), (log, match_path, None)]
    for pairs in candidates:  # with --match-candidates
        tables.append((pairs, out.with_name(stem + ".match_candidates.tsv"), None))
    if len(skipped):
        tables.append((skipped, out.with_name(stem + ".excluded.tsv"), None))
    for table, path, float_format in tables:  # each complete before it takes its name
        part = path.with_name(path.name + ".part")
        write_tsv(table, part, float_format=float_format)
        part.replace(path)
    counts = log["status"].value_counts().to_dict()
    used = [c for c in scores.columns if c.endswith("n_matched")]
    matched = ", ".join(f"{c}={int(scores[c].iloc[0])}" for c in used) if len(scores) else ""
    wrote = ", ".join(str(path) for _, path, _ in tables)
    print(f"scored {len(scores)} samples ({matched}; {counts}); wrote {wrote}")
    return 0


def _converted_formats(convert: str, paths: list[str]) -> tuple[str, ...]:
    """The formats to read through .pgen copies (``convert``: auto, always or never)."""
    from rvfedprs.genotypes.convert import (
        CONVERTED_BY_DEFAULT,
        CONVERTIBLE_FORMATS,
        plink2_available,
    )
    from rvfedprs.genotypes.formats import genotype_format

    formats = {"auto": CONVERTED_BY_DEFAULT, "always": CONVERTIBLE_FORMATS}.get(convert, ())
    slow = [p for p in paths if genotype_format(p, default="bfile") in formats]
    if convert == "auto" and slow and not plink2_available():
        print(
            "rvfedprs prepare score: plink2 is not on the PATH, so "
            f"{', '.join(slow)} {'is' if len(slow) == 1 else 'are'} read directly, without a .pgen "
            "copy (several times slower on large files); install plink2 for the fast path, or "
            "pass --direct to choose this one",
            file=sys.stderr,
        )
        return ()
    return formats if slow else ()
