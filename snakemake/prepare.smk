# Stage 1: validate -> QC -> federated allele frequencies -> common/rare split -> PRS and rare
# dosages -> per-client feature sets (results/clients/{client}/...) and the exclusion log.
# Each job's wall and CPU seconds and peak memory: {LOGS}/benchmarks/<rule>/... (Snakemake's).

POOLED_TARGETS += [
    "results/clients.tsv",
    "results/rare_variants.tsv",
    "results/outcome.json",
    f"{LOGS}/exclusions.tsv",
    f"{LOGS}/score_match.tsv",
]


if PIPE["clients_from"] is not None:

    rule make_samples_sheet:
        input:
            psam=PIPE["clients_from"]["psam"],
        output:
            f"{PREP}/samples_sheet.tsv",
        params:
            column=PIPE["clients_from"]["column"],
        resources:
            **job_size("make_samples_sheet"),
        log:
            f"{LOGS}/make_samples_sheet.log",
        script:
            "../pipelines/make_samples_sheet.py"


rule import_genotypes:
    input:
        lambda wildcards: genotype_files(COHORT["genotypes"][int(wildcards.index)]),
    output:
        pgen=f"{PREP}/genotypes/{{index}}.pgen",
        pvar=f"{PREP}/genotypes/{{index}}.pvar",
        psam=f"{PREP}/genotypes/{{index}}.psam",
    params:
        genotypes=lambda wildcards: COHORT["genotypes"][int(wildcards.index)],
        pipeline=settings("vcf_genotype_field", "vcf_half_call", "bgen_ref_allele"),
    wildcard_constraints:
        index=r"\d+",
    resources:
        **job_size("import_genotypes"),
    benchmark:
        f"{LOGS}/benchmarks/import_genotypes/{{index}}.tsv"
    log:
        f"{LOGS}/import_genotypes/{{index}}.log",
    script:
        "../pipelines/import_genotypes.py"


checkpoint validate_inputs:
    input:
        genotypes=GENOTYPE_FILES,
        samples=COHORT["samples"],
        phenotypes=COHORT["phenotypes"],
        scoring_file=COHORT["scoring_file"],
    output:
        cohort=f"{PREP}/cohort.tsv",
        exclusions=f"{LOGS}/exclusions/validate_inputs.tsv",
    params:
        genotypes=GENOTYPES,
        pipeline=settings(
            "phenotype", "genome_build", "clients_from", "on_sample_mismatch", "covariates", "covariate_missing", "on_invalid_client", "min_samples_per_client", "min_cases_per_client", *READER_KEYS
        ),
    resources:
        **job_size("validate_inputs"),
    benchmark:
        f"{LOGS}/benchmarks/validate_inputs.tsv"
    log:
        f"{LOGS}/validate_inputs.log",
    script:
        "../pipelines/validate_inputs.py"


rule sample_qc:
    input:
        genotypes=GENOTYPE_FILES,
        cohort=f"{PREP}/cohort.tsv",
    output:
        qc=f"{PREP}/sample_qc/{{client}}.tsv",
        exclusions=f"{LOGS}/exclusions/sample_qc/{{client}}.tsv",
    params:
        genotypes=GENOTYPES,
        pipeline=settings(
            "qc", "chunk_size", *READER_KEYS
        ),
    resources:
        **job_size("sample_qc"),
    benchmark:
        f"{LOGS}/benchmarks/sample_qc/{{client}}.tsv"
    log:
        f"{LOGS}/sample_qc/{{client}}.log",
    script:
        "../pipelines/sample_qc.py"


rule client_counts:
    input:
        genotypes=GENOTYPE_FILES,
        qc=f"{PREP}/sample_qc/{{client}}.tsv",
    output:
        counts=f"{PREP}/counts/{{client}}.parquet",
        skipped=f"{PREP}/counts/{{client}}.skipped.tsv",
    params:
        genotypes=GENOTYPES,
        pipeline=settings(
            "chunk_size", "phenotype", *READER_KEYS
        ),
    resources:
        **job_size("client_counts"),
    benchmark:
        f"{LOGS}/benchmarks/client_counts/{{client}}.tsv"
    log:
        f"{LOGS}/client_counts/{{client}}.log",
    script:
        "../pipelines/client_counts.py"


rule combine_counts:
    input:
        counts=per_client(f"{PREP}/counts/{{client}}.parquet"),
        skipped=per_client(f"{PREP}/counts/{{client}}.skipped.tsv"),
        frequencies=PIPE["frequencies"]["file"] or [],
    output:
        variants=f"{PREP}/variants.tsv",
        rare="results/rare_variants.tsv",
        exclusions=f"{LOGS}/exclusions/combine_counts.tsv",
    params:
        pipeline=settings(
            "qc", "rare_maf_max", "on_multiallelic"
        ),
    resources:
        **job_size("combine_counts"),
    benchmark:
        f"{LOGS}/benchmarks/combine_counts.tsv"
    log:
        f"{LOGS}/combine_counts.log",
    script:
        "../pipelines/combine_counts.py"


rule match_scores:
    input:
        variants=f"{PREP}/variants.tsv",
        scoring_file=COHORT["scoring_file"],
    output:
        weights=f"{PREP}/score_weights.txt.gz",
        match=f"{LOGS}/score_match.tsv",
        exclusions=f"{LOGS}/exclusions/match_scores.tsv",
    params:
        pipeline=settings(
            "min_overlap", "genome_build", "keep_ambiguous", "qc"
        ),
    resources:
        **job_size("match_scores"),
    benchmark:
        f"{LOGS}/benchmarks/match_scores.tsv"
    log:
        f"{LOGS}/match_scores.log",
    script:
        "../pipelines/match_scores.py"


rule client_features:
    input:
        genotypes=GENOTYPE_FILES,
        qc=f"{PREP}/sample_qc/{{client}}.tsv",
        variants=f"{PREP}/variants.tsv",
        rare="results/rare_variants.tsv",
        weights=f"{PREP}/score_weights.txt.gz",
        phenotypes=COHORT["phenotypes"],
    output:
        samples="results/clients/{client}/samples.parquet",
        rare="results/clients/{client}/rare_dosages.npz",
    params:
        genotypes=GENOTYPES,
        pipeline=settings(
            "test_fraction", "random_seed", "min_overlap", "chunk_size", *READER_KEYS,
            "phenotype", "covariates", "covariate_missing"
        ),
    resources:
        **job_size("client_features"),
    benchmark:
        f"{LOGS}/benchmarks/client_features/{{client}}.tsv"
    log:
        f"{LOGS}/client_features/{{client}}.log",
    script:
        "../pipelines/client_features.py"


rule summarize_clients:
    input:
        samples=per_client("results/clients/{client}/samples.parquet"),
        rare=per_client("results/clients/{client}/rare_dosages.npz"),
    output:
        clients="results/clients.tsv",
        outcome="results/outcome.json",
    params:
        pipeline=settings("phenotype"),
    resources:
        **job_size("summarize_clients"),
    benchmark:
        f"{LOGS}/benchmarks/summarize_clients.tsv"
    log:
        f"{LOGS}/summarize_clients.log",
    script:
        "../pipelines/summarize_clients.py"


rule collect_exclusions:
    input:
        validate=f"{LOGS}/exclusions/validate_inputs.tsv",
        sample_qc=per_client(f"{LOGS}/exclusions/sample_qc/{{client}}.tsv"),
        combine=f"{LOGS}/exclusions/combine_counts.tsv",
        match=f"{LOGS}/exclusions/match_scores.tsv",
    output:
        f"{LOGS}/exclusions.tsv",
    resources:
        **job_size("collect_exclusions"),
    log:
        f"{LOGS}/collect_exclusions.log",
    script:
        "../pipelines/collect_exclusions.py"
