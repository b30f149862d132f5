"""Metric maths (pure): utility, membership inference, drift and certificate metrics.

See ``docs/metrics.md`` for what each number means and how it is exported.
"""

from simulator.metrics.certificate import BOUND_KINDS, CertificateStatus, certificate_status
from simulator.metrics.drift import (
    LabelShift,
    MMDTest,
    chi2_homogeneity_p_value,
    js_divergence,
    label_distribution,
    label_shift,
    mmd2_unbiased,
    mmd_permutation_test,
    rbf_kernel,
    total_variation,
)
from simulator.metrics.lira import (
    LiraReferences,
    lira_scores,
    out_mask_for,
    reference_phi,
    train_references,
)
from simulator.metrics.mia import (
    EfficacyResult,
    LogisticFit,
    fit_logistic_1d,
    mia_efficacy,
    threshold_attacks,
)
from simulator.metrics.online import (
    DETECTORS,
    AdwinConfig,
    ChangeMonitor,
    Detection,
    DetectorConfig,
    PageHinkleyConfig,
)
from simulator.metrics.roc import (
    DEFAULT_FPRS,
    AttackSummary,
    fpr_label,
    max_advantage,
    roc_auc,
    summarize_attack,
    tpr_at_fpr,
)
from simulator.metrics.scores import (
    THRESHOLD_ATTACKS,
    MembershipScores,
    class_probabilities,
    lira_phi,
    membership_scores,
    ovr_loss,
)
from simulator.metrics.utility import (
    accuracy,
    prediction_agreement,
    relative_distance,
    weighted_f1,
)

__all__ = [
    "BOUND_KINDS",
    "DEFAULT_FPRS",
    "DETECTORS",
    "THRESHOLD_ATTACKS",
    "AdwinConfig",
    "AttackSummary",
    "CertificateStatus",
    "ChangeMonitor",
    "Detection",
    "DetectorConfig",
    "EfficacyResult",
    "LabelShift",
    "LiraReferences",
    "LogisticFit",
    "MMDTest",
    "MembershipScores",
    "PageHinkleyConfig",
    "accuracy",
    "certificate_status",
    "chi2_homogeneity_p_value",
    "class_probabilities",
    "fit_logistic_1d",
    "fpr_label",
    "js_divergence",
    "label_distribution",
    "label_shift",
    "lira_phi",
    "lira_scores",
    "max_advantage",
    "membership_scores",
    "mia_efficacy",
    "mmd2_unbiased",
    "mmd_permutation_test",
    "out_mask_for",
    "ovr_loss",
    "prediction_agreement",
    "rbf_kernel",
    "reference_phi",
    "relative_distance",
    "roc_auc",
    "summarize_attack",
    "threshold_attacks",
    "total_variation",
    "tpr_at_fpr",
    "train_references",
    "weighted_f1",
]
