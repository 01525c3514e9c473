"""The admission decision for one pod: pure, no I/O.

A pod *uses DCU* when any container or init container asks for a DCU, or names a DCU resource
in a way that cannot be honoured (common/protocol/podchecks.py, `DcuPod.asks`; a lone `dcunum: 0` asks
for nothing). Such a pod is routed to hami-scheduler, or denied with a message that says what
to change. Pods that do not use DCU pass untouched. In DRA mode the pod is instead rewritten
to ask through ResourceClaims (common/protocol/dra/translate.py); the templates it names are returned in the
decision, for the shell to create: this module does no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import jsonpatch

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.dra.translate import TranslateError, extended_resource_claim, translate
from hami_dcu.common.protocol.podchecks import CheckSettings, DcuPod, Stage, dcu_pod, first_refusal
from hami_dcu.common.protocol.preferences import selection_problem
from hami_dcu.common.protocol.quota import Amount, Reservations
from hami_dcu.common.protocol.requests import RequestError
from hami_dcu.common.protocol.writers import Identities
from hami_dcu.webhook.advice import scheduling_warnings
from hami_dcu.webhook.draquota import ClaimShapeError, claim_shape_problem
from hami_dcu.webhook.quotacheck import QuotaLookup, quota_verdict
from hami_dcu.webhook.rename import Adopted, adopt_names
from hami_dcu.webhook.volcano import memory_unit_problem

JSON = dict[str, Any]
DEVICE_PLUGIN, DRA = "devicePlugin", "dra"
MODES = (DEVICE_PLUGIN, DRA)


@dataclass(frozen=True)
class Settings:
    scheduler_name: str = keys.DEFAULT_SCHEDULER_NAME
    # schedulerName values we may replace; anything else is the user's explicit choice.
    overwritable_schedulers: tuple[str, ...] = (keys.KUBE_DEFAULT_SCHEDULER,)
    # The naming set this process speaks (cli --naming); the other set's names are renamed.
    # Required and keyword-only: a default would let a forgotten argument speak the dcu set.
    naming: keys.Naming = field(kw_only=True)
    # Resource names other than the naming set's (--resource-count and the like); None: the set's.
    resource_names: keys.ResourceNames | None = None
    # Who may write allocation state (common/protocol/writers.py); nobody when not configured.
    identities: Identities = field(default_factory=Identities)
    # Namespace DCU quotas and use (webhook/quotacheck.py); none when the webhook runs alone.
    quota: QuotaLookup | None = None
    # Volcano mode in the extender's process: admitted pods count from their admission, a whole
    # card as the largest card registered (common/protocol/quota.py, scheduler/quotas.py). None: as placed.
    reservations: Reservations | None = None
    # devicePlugin: route DCU pods to the extender; dra: rewrite them into claims (docs/architecture.md,
    # DRA mode).
    mode: str = DEVICE_PLUGIN
    # DRA mode: compute units per card size published in ResourceSlices (the shell reads them),
    # which a cores percentage needs to become a compute-unit count.
    card_units: tuple[int, ...] = ()
    # DRA mode: the DeviceClass names the count resource as its extendedResourceName (Kubernetes
    # 1.37+, --dra-extended-resource): a pod asking whole cards by the count alone keeps its
    # resources, and kube-scheduler makes its claim. False: every DCU pod is rewritten into claims.
    extended_resource: bool = False
    # Volcano mode: pods with this schedulerName are Volcano's to place (its Hygon
    # deviceshare); they keep it, but the deny rules still apply. Empty: off.
    volcano_scheduler: str = ""

    @property
    def resources(self) -> keys.ResourceNames:
        return self.resource_names or self.naming.resources


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str  # a short, stable code for metrics and logs
    message: str = ""
    patch: list[JSON] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # DRA mode: ResourceClaimTemplates the patched pod names, for the shell to get-or-create.
    templates: list[JSON] = field(default_factory=list)
    # DRA mode: the claim specs this admission adds to the namespace (a rewritten pod's claims,
    # a ResourceClaim being created), for the shell to check against the namespace DCU quota.
    quota_claims: list[JSON] = field(default_factory=list)
    # A ResourceClaimTemplate holds nothing itself: its one claim is checked against the limits alone.
    quota_alone: bool = False
    # Volcano mode: what the admitted pod asks, for the shell to reserve until the watch shows it.
    quota_reserve: Amount | None = None


def _deny(reason: str, message: str) -> Decision:
    return Decision(allowed=False, reason=reason, message=message)


@dataclass(frozen=True)
class Admission:
    """What every admission step reads: the pod as the API server holds it, the pod renamed to
    this naming set, its parsed DCU asks, and the settings."""

    original: JSON
    pod: JSON
    adopted: Adopted
    parsed: DcuPod
    settings: Settings

    @property
    def meta(self) -> JSON:
        return self.pod.get("metadata") or {}

    @property
    def spec(self) -> JSON:
        return self.pod.get("spec") or {}

    @property
    def scheduler(self) -> str:
        return self.spec.get("schedulerName") or ""

    @property
    def rename_warnings(self) -> list[str]:
        return self.adopted.warnings(self.settings.naming)


# One admission rule: a decision when the rule settles the pod, None to go on to the next.
Step = Callable[[Admission], Decision | None]


def not_a_dcu_pod(a: Admission) -> Decision | None:
    """`dcunum: 0` alone asks for no DCU (as in HAMi): such a pod is not ours to route. The
    opt-out label exempts only such pods: a DCU pod wearing it is judged as any other (the
    extender and the device plugin would refuse it anyway, with the same words)."""
    if a.parsed.asks:
        return None
    opted_out = (a.meta.get("labels") or {}).get(keys.WEBHOOK_LABEL) == keys.WEBHOOK_IGNORE
    return Decision(allowed=True, reason="ignored" if opted_out else "no-dcu")


def deny_rules(a: Admission) -> Decision | None:
    """The rules every stage shares (common/protocol/podchecks.py), as at creation."""
    checks = CheckSettings(a.settings.resources, a.settings.scheduler_name)
    refused = first_refusal(a.parsed, checks, Stage.CREATE)
    return None if refused is None else _deny(refused.check, refused.message)


def selection_lists(a: Admission) -> Decision | None:
    """Card selection lists longer than the extender reads (common/protocol/preferences.py), in either
    naming set's keys as the author wrote them: refused in every mode, with the parser's words."""
    problem = selection_problem((a.original.get("metadata") or {}).get("annotations") or {})
    return None if problem is None else _deny("selection-too-long", problem)


def claims_in_dra_mode(a: Admission) -> Decision | None:
    """DRA mode: kube-scheduler places claims itself; no extender quota book or policy
    annotations apply. Whole cards asked by the count alone go through the DeviceClass's
    extendedResourceName where the cluster has it, unrewritten; everything else becomes claims."""
    if a.settings.mode != DRA:
        return None
    if a.settings.extended_resource and not a.adopted.renames:
        try:
            claim = extended_resource_claim(a.pod, a.settings.resources)
        except RequestError as exc:  # the deny rules refused such a count already
            return _deny("dra-untranslatable", str(exc))
        if claim is not None:
            return _as_extended_resource(a, claim)
    return _as_claims(a.original, a.pod, a.settings, a.rename_warnings)


def _as_extended_resource(a: Admission, claim: JSON) -> Decision:
    """A whole-card pod kube-scheduler serves through the DeviceClass's extendedResourceName:
    its resources stay as written (a pod written for the other naming set is rewritten into
    claims instead, as its resources change anyway); only its scheduler is routed, as for a
    rewritten pod. The claim kube-scheduler will make for it is checked against the namespace
    DCU quota now, and again when kube-scheduler creates it (a ResourceClaim review)."""
    spec = dict(a.spec)
    _route_claims_scheduler(spec, a.settings)
    patch: list[JSON] = []
    if spec.get("schedulerName") != a.scheduler:
        op = "replace" if "schedulerName" in (a.original.get("spec") or {}) else "add"
        patch = [{"op": op, "path": "/spec/schedulerName", "value": spec["schedulerName"]}]
    return Decision(allowed=True, reason="extended-resource", patch=patch, warnings=a.rename_warnings,
                    quota_claims=[claim])


def left_to_volcano(a: Admission) -> Decision | None:
    """Volcano mode: Volcano's pods keep their scheduler, under its memory unit and the quota."""
    if not a.settings.volcano_scheduler or a.scheduler != a.settings.volcano_scheduler:
        return None
    unit = memory_unit_problem(a.pod, a.settings.resources)
    if unit:
        return _deny("volcano-memory-unit", unit)
    verdict = quota_verdict(a.pod, a.settings.resources, a.settings.quota, a.settings.reservations)
    if verdict.problem:
        return _deny(verdict.reason, verdict.problem)
    return Decision(allowed=True, reason="left-to-volcano", warnings=a.rename_warnings,
                    patch=_renames_only(a.original, a.pod) if a.adopted.renames else [],
                    quota_reserve=verdict.reserve)


def other_scheduler(a: Admission) -> Decision | None:
    """A schedulerName the user chose is kept, with a warning that no DCU will be honoured."""
    current, ours = a.scheduler, a.settings.scheduler_name
    if not current or current == ours or current in a.settings.overwritable_schedulers:
        return None
    return Decision(allowed=True, reason="other-scheduler",
                    warnings=[f"schedulerName {current} is kept: its DCU request will not be honoured by {ours}"[:120]])


def namespace_quota(a: Admission) -> Decision | None:
    verdict = quota_verdict(a.pod, a.settings.resources, a.settings.quota, a.settings.reservations)
    return None if not verdict.problem else _deny(verdict.reason, verdict.problem)


def route_to_scheduler(a: Admission) -> Decision:
    """The last step: schedulerName set to hami-scheduler (and the other set's names renamed)."""
    settings, original, spec, meta = a.settings, a.original, a.spec, a.meta
    hints = a.rename_warnings + scheduling_warnings(meta.get("annotations") or {})
    current = a.scheduler
    if current == settings.scheduler_name and not a.adopted.renames:
        return Decision(allowed=True, reason="already-routed", warnings=hints)
    if not a.adopted.renames:
        # The common case: one field set. Written out, as jsonpatch.make_patch would write it
        # (its diff of the spec was most of a review's CPU time).
        op = "replace" if "schedulerName" in (original.get("spec") or {}) else "add"
        return Decision(allowed=True, reason="routed",
                        patch=[{"op": op, "path": "/spec/schedulerName", "value": settings.scheduler_name}],
                        warnings=hints)
    # Only spec (and renamed annotations) change, so only they are diffed (the whole pod costs 3x the time).
    before: JSON = {"spec": original.get("spec") or {}}
    after: JSON = {"spec": {**spec, "schedulerName": settings.scheduler_name}}
    if meta.get("annotations") != (original.get("metadata") or {}).get("annotations"):
        before["metadata"] = {"annotations": (original.get("metadata") or {}).get("annotations") or {}}
        after["metadata"] = {"annotations": meta.get("annotations") or {}}
    patch = jsonpatch.make_patch(before, after).patch
    reason = "routed" if current != settings.scheduler_name else "renamed"
    return Decision(allowed=True, reason=reason, patch=patch, warnings=hints)


# The admission rules, in the order they are asked; the first decision stands, and a pod no
# rule settles is routed to hami-scheduler.
STEPS: tuple[Step, ...] = (
    not_a_dcu_pod,
    deny_rules,
    selection_lists,
    claims_in_dra_mode,
    left_to_volcano,
    other_scheduler,
    namespace_quota,
)


def review(pod: JSON, settings: Settings) -> Decision:
    # A pod written for the other naming set is judged (and patched) as this set names it.
    adopted = adopt_names(pod, settings.naming)
    if adopted.conflict:
        return _deny("mixed-naming", adopted.conflict)
    admission = Admission(pod, adopted.pod, adopted, dcu_pod(adopted.pod, settings.resources), settings)
    for step in STEPS:
        decision = step(admission)
        if decision is not None:
            return decision
    routed = route_to_scheduler(admission)
    if settings.reservations is None:
        return routed
    # Volcano mode: a hami-scheduler pod counts from its admission too (Volcano's pods count
    # its reservation at theirs), as namespace_quota found it fits.
    verdict = quota_verdict(admission.pod, settings.resources, settings.quota, settings.reservations)
    return replace(routed, quota_reserve=verdict.reserve)


def _renames_only(original: JSON, pod: JSON) -> list[JSON]:
    """The patch of the other naming set's names alone (a pod another scheduler places)."""
    before: JSON = {"spec": original.get("spec") or {},
                    "metadata": {"annotations": (original.get("metadata") or {}).get("annotations") or {}}}
    after: JSON = {"spec": pod.get("spec") or {},
                   "metadata": {"annotations": (pod.get("metadata") or {}).get("annotations") or {}}}
    return jsonpatch.make_patch(before, after).patch


def _as_claims(original: JSON, pod: JSON, settings: Settings, hints: list[str]) -> Decision:
    """DRA mode: `pod` (already renamed to this naming set) rewritten to ask through claims; the
    patch is against `original`, what the API server holds."""
    names = settings.resources
    try:
        translation = translate(pod, settings.card_units, (names,))
    except (TranslateError, RequestError) as exc:
        return _deny("dra-untranslatable", str(exc))
    if not translation.patch:
        # The author wrote resourceClaims by hand: theirs to keep, but no node offers the DCU
        # resources beside them in DRA mode, so say so rather than leave the pod Pending silently.
        kept = (f"spec.resourceClaims is set, so {names.count}/{names.memory}/{names.cores} are not rewritten; "
                "no node offers them in DRA mode")
        return Decision(allowed=True, reason="own-claims", warnings=[*hints, kept])
    spec = jsonpatch.apply_patch({"spec": pod.get("spec") or {}}, translation.patch)["spec"]
    _route_claims_scheduler(spec, settings)
    before, after = _claims_patch_sides(original, pod, spec)
    warning = (f"DRA mode: {names.count}, {names.memory}, {names.cores} rewritten into claims: "
               + ", ".join(_claim_rewrites(spec)))
    by_name = {t["metadata"]["name"]: t for t in translation.templates}
    # One claim per pod claim, a template shared by two containers included: each is a claim of its own.
    claims = [by_name[c["resourceClaimTemplateName"]]["spec"]["spec"] for c in spec["resourceClaims"]]
    return Decision(allowed=True, reason="claims", patch=jsonpatch.make_patch(before, after).patch,
                    warnings=[*hints, warning], templates=translation.templates, quota_claims=claims)


def _route_claims_scheduler(spec: JSON, settings: Settings) -> None:
    current = spec.get("schedulerName") or ""
    if not current or current in settings.overwritable_schedulers:
        # kube-scheduler allocates the claims either way; hami-scheduler's profile also asks
        # the extender's /prioritize, which packs them onto the fewest nodes (scheduler/packing.py).
        spec["schedulerName"] = settings.scheduler_name


def _claims_patch_sides(original: JSON, pod: JSON, spec: JSON) -> tuple[JSON, JSON]:
    """What the patch goes from and to: the spec, and the annotations when the renaming changed them."""
    before: JSON = {"spec": original.get("spec") or {}}
    after: JSON = {"spec": spec}
    annotations = (pod.get("metadata") or {}).get("annotations")
    original_annotations = (original.get("metadata") or {}).get("annotations")
    if annotations != original_annotations:  # renamed type annotations, as in device-plugin mode
        before["metadata"] = {"annotations": original_annotations or {}}
        after["metadata"] = {"annotations": annotations or {}}
    return before, after


def _claim_rewrites(spec: JSON) -> list[str]:
    """For the warning: each container's claim, and the template it is made from."""
    templates = {claim["name"]: claim["resourceClaimTemplateName"] for claim in spec["resourceClaims"]}
    return [f"{c['name']} -> claim {claim['name']} (ResourceClaimTemplate {templates[claim['name']]})"
            for section in ("initContainers", "containers") for c in spec.get(section) or []
            for claim in (c.get("resources") or {}).get("claims") or [] if claim["name"] in templates]


CLAIM, CLAIM_TEMPLATE = "ResourceClaim", "ResourceClaimTemplate"


def claim_kind(request: JSON) -> str | None:
    """CLAIM or CLAIM_TEMPLATE for the creation of one (resource.k8s.io), else None."""
    kind = request["kind"]
    if request["operation"] != "CREATE" or kind.get("group") != "resource.k8s.io":
        return None
    return kind.get("kind") if kind.get("kind") in (CLAIM, CLAIM_TEMPLATE) else None


def review_claim(kind: str, obj: JSON) -> Decision:
    """DRA mode, a ResourceClaim or ResourceClaimTemplate being created: allowed here, with its
    claim spec for the shell's quota check. Raises ClaimShapeError for a spec not of the API's shape."""
    spec: Any = obj.get("spec")
    if kind == CLAIM_TEMPLATE and isinstance(spec, dict):
        spec = spec.get("spec")  # the claim's spec within the template's; any other shape is reported below
    problem = claim_shape_problem(spec)
    if problem is not None:
        raise ClaimShapeError(f"{kind} is malformed: {problem}")
    return Decision(allowed=True, reason="claim" if kind == CLAIM else "claim-template", quota_claims=[spec or {}],
                    quota_alone=kind == CLAIM_TEMPLATE)
