"""The preparation steps as a federation: what each site computes, what the coordinator does.

- :mod:`~rvfedprs.prepare.site` — on one site's own files: validation, sample QC, the summary
  counts it releases, its features (PRS, rare dosages, covariates, train/test split);
- :mod:`~rvfedprs.prepare.coordinator` — pure functions of what sites release: variant QC and
  the global frequencies, the common/rare split, and the scoring file matched to the global
  variant set.

The pooled Snakemake workflow (``pipelines/``) and a consortium study (:mod:`rvfedprs.study`)
call the same functions, so the single-machine pipeline is the special case "all sites on one
machine" and gives the same features bit for bit.
"""
