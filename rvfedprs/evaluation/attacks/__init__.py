"""Privacy attacks on what a federation releases (design §10, paper Table V).

- :mod:`.mia` — membership-inference scores (LOSS, LiRA offline/online, RMIA) and their metrics
  (advantage ≥ 0, held-out accuracy − 0.5, AUC, resolvable TPR at low FPR, pooling);
- :mod:`.outputs` — the model outputs an attacker observes;
- :mod:`.shadows` — offline reference models and online shadow federations (trained by a
  caller-supplied function, so this package knows no engine);
- :mod:`.audit` — auditing every client's model and pooling the audits;
- :mod:`.updates`, :mod:`.bloom`, :mod:`.channels` — what the server infers of each client's
  carried rare variants from its update (single or securely summed), its Bloom filter, or both;
- :mod:`.homer` — Homer et al.'s membership test on summed allele counts;
- :mod:`.run` — the audit of one trained run (``rvfedprs mia``).
"""

from rvfedprs.evaluation.attacks.audit import (
    ATTACK_ALIASES,
    ATTACKS,
    SHADOW_ATTACKS,
    AuditSet,
    audit_federation,
    audit_model,
    balanced_audit_set,
    pool_audits,
    resolve_attacks,
    resolve_targets,
    score_rows,
)
from rvfedprs.evaluation.attacks.bloom import (
    bloom_membership_attack,
    plain_vs_keyed,
    server_membership_tests,
)
from rvfedprs.evaluation.attacks.channels import (
    CHANNELS,
    SeenUpdate,
    audit_channels,
    carried_mask,
)
from rvfedprs.evaluation.attacks.homer import homer_statistic, homer_test, pool_frequencies
from rvfedprs.evaluation.attacks.mia import (
    FPR_LEVELS,
    attack_metrics,
    decision_metrics,
    pooled_attack_metrics,
)
from rvfedprs.evaluation.attacks.outputs import example_confidence, example_logits
from rvfedprs.evaluation.attacks.run import AuditResult, RoundView, audit_run, channel_rows
from rvfedprs.evaluation.attacks.shadows import (
    ShadowModels,
    ShadowSet,
    TrainShadow,
    reference_population,
    train_reference_models,
    train_shadow_federations,
)
from rvfedprs.evaluation.attacks.updates import carried_from_update, update_channel_scores

__all__ = [
    "ATTACKS",
    "ATTACK_ALIASES",
    "CHANNELS",
    "FPR_LEVELS",
    "SHADOW_ATTACKS",
    "AuditResult",
    "AuditSet",
    "RoundView",
    "SeenUpdate",
    "ShadowModels",
    "ShadowSet",
    "TrainShadow",
    "attack_metrics",
    "audit_channels",
    "audit_federation",
    "audit_model",
    "audit_run",
    "balanced_audit_set",
    "bloom_membership_attack",
    "carried_from_update",
    "carried_mask",
    "channel_rows",
    "decision_metrics",
    "example_confidence",
    "example_logits",
    "homer_statistic",
    "homer_test",
    "plain_vs_keyed",
    "pool_audits",
    "pool_frequencies",
    "pooled_attack_metrics",
    "reference_population",
    "resolve_attacks",
    "resolve_targets",
    "score_rows",
    "server_membership_tests",
    "train_reference_models",
    "train_shadow_federations",
    "update_channel_scores",
]
