"""What a failed job's error says, as data: the ErrorInfo reasons and message patterns that tell
a preemption or stockout, an expired capacity wait, a quota shortfall and a user-code failure apart.

:func:`airflow_gpu_sched.orchestration.outcomes.classify_failure` reads these; nothing else does. Users add
their own patterns without a release through the Airflow option ``[gpu_sched] failure_patterns``
(env ``AIRFLOW__GPU_SCHED__FAILURE_PATTERNS``): a JSON object
``{"preempted": ["regex", ...], "capacity_timeout": [...], "quota_exceeded": [...], "failed": [...]}``.
Their patterns are checked first (against the message and each ErrorInfo reason), then the
built-in reasons, then the built-in message patterns.

Matching runs in the triggerer's event loop, so it is bounded: every pattern reads only the first
:data:`MESSAGE_CAP` characters of the message (the classifying phrase is at its start) and the
first :data:`REASON_CAP` of each reason; and a user pattern that can backtrack for ever is refused
when the option is read (a quantifier inside a quantified group, an alternation under a
quantifier, more than one unbounded quantifier), so no message can stall every trigger. The option is read on first use (not at
import: the triggerer and the workers both classify, each reads its own config) and cached for
the process.

May import: nothing of this package; airflow only inside functions.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache

SECTION, OPTION = "gpu_sched", "failure_patterns"
MESSAGE_CAP = 1024  # characters of an error message the patterns read
REASON_CAP = 128  # characters of an ErrorInfo reason (Google's are UPPER_SNAKE words)
_UNBOUNDED = 64  # a repeat allowing more than this counts as unbounded
ENV_VAR = "AIRFLOW__GPU_SCHED__FAILURE_PATTERNS"
KINDS = ("failed", "capacity_timeout", "quota_exceeded", "preempted")  # the order messages are tried in

# google.rpc.ErrorInfo reasons. Google documents none for training jobs: these are the emulator's
# (assumed) and plausible names; a reason that is not here falls through to the message.
PREEMPTED_REASONS = frozenset({"STOCKOUT", "SPOT_PREEMPTED", "PREEMPTED", "ZONE_RESOURCE_POOL_EXHAUSTED"})
WAIT_EXPIRED_REASONS = frozenset({"FLEX_START_WAIT_EXPIRED", "MAX_WAIT_DURATION_EXCEEDED"})

# Message patterns, by kind. Sources: "The replica workerpool1-1 exited with a non-zero status of 1"
# (GoogleCloudPlatform/vertex-ai-samples#1504); "Resources are insufficient in region: us-central1"
# (openreview/openreview-expertise#401); "The following quota metrics exceed quota limits: ..."
# (vertex-ai-samples#700, #3479); STOCKOUT (Google's Spot VMs training page, seed 001). The
# FLEX_START wait phrasings are assumed: Google documents no message for it.
BUILT_IN: dict[str, tuple[str, ...]] = {
    "failed": (r"exited with a non-zero status", r"non-zero exit"),
    "capacity_timeout": (r"maxWaitDuration", r"max_wait_duration", r"capacity wait",
                         r"could not be scheduled within", r"could not get its resources"),
    "quota_exceeded": (r"quota metrics exceed quota limits", r"exceeds? (the )?quota", r"insufficient quota"),
    "preempted": (r"stockout", r"preempt", r"resources are insufficient", r"spot vm", r"capacity was reclaimed"),
}

# A FAILED end that is a cancel's: CANCELLING "may only go to either JOB_STATE_SUCCEEDED,
# JOB_STATE_FAILED or JOB_STATE_CANCELLED" (job_state.proto); the container killed by the cancel's
# SIGTERM exits 143. Google documents no message for it: the wording is assumed (the emulator's,
# variant cancelOutcome: failed); a watch that saw CANCELLING knows it without the wording.
CANCEL_ENDED = re.compile(r"while the job was being cancel", re.I)


class FailurePatternsError(ValueError):
    """The ``[gpu_sched] failure_patterns`` option is not what it must be."""


@dataclass(frozen=True)
class Patterns:
    user: dict[str, tuple[re.Pattern, ...]]
    built_in: dict[str, re.Pattern]

    def user_kind(self, message: str, reasons: frozenset[str] = frozenset()) -> str | None:
        """The first kind one of the user's patterns matches (in the message or a reason)."""
        message = message[:MESSAGE_CAP]
        reasons = frozenset(r[:REASON_CAP] for r in reasons)
        for kind in KINDS:
            for pattern in self.user.get(kind, ()):
                if pattern.search(message) or any(pattern.search(r) for r in reasons):
                    return kind
        return None

    def built_in_kind(self, message: str) -> str | None:
        """The first kind a built-in pattern matches in the message, user code first (its own
        logs may mention anything), quota before the stockout words (a quota message is no stockout)."""
        message = message[:MESSAGE_CAP]
        return next((kind for kind in KINDS if self.built_in[kind].search(message)), None)


def _compile_built_in() -> dict[str, re.Pattern]:
    return {kind: re.compile("|".join(BUILT_IN[kind]), re.I) for kind in KINDS}


def parse_user_patterns(text: str | None) -> dict[str, tuple[re.Pattern, ...]]:
    """The option's JSON -> compiled patterns; a clear error naming the option otherwise."""
    if not text or not text.strip():
        return {}
    where = f"[{SECTION}] {OPTION} (env {ENV_VAR})"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FailurePatternsError(f"{where} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise FailurePatternsError(f"{where} must be a JSON object of kind -> list of regexes, "
                                   f"kinds {list(KINDS)}")
    found: dict[str, tuple[re.Pattern, ...]] = {}
    for kind, patterns in data.items():
        if kind not in KINDS:
            raise FailurePatternsError(f"{where}: unknown kind {kind!r} (kinds: {list(KINDS)})")
        if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
            raise FailurePatternsError(f"{where}: {kind!r} must be a list of regex strings")
        compiled = []
        for pattern in patterns:
            try:
                compiled.append(re.compile(pattern, re.I))
            except re.error as exc:
                raise FailurePatternsError(
                    f"{where}: {kind!r} pattern {pattern!r} is not a valid regex: {exc}") from None
            risk = backtracking_risk(pattern)
            if risk:
                raise FailurePatternsError(f"{where}: {kind!r} pattern {pattern!r} is refused: {risk} (it could "
                                           f"backtrack for minutes in the triggerer's event loop)")
        found[kind] = tuple(compiled)
    return found


def backtracking_risk(pattern: str) -> str | None:
    """Why the regex may take exponential (or high polynomial) time, or None: the shapes behind
    catastrophic backtracking, read from the parsed pattern."""
    try:
        from re import _parser  # the stdlib's own parser (sre_parse)
    except ImportError:  # Python 3.10: the same module under its old name
        import sre_parse as _parser

    unbounded = 0

    def walk(items: object, under_repeat: bool) -> str | None:
        nonlocal unbounded
        for op, arg in items:
            name = str(op)
            if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
                low, high, body = arg
                if high > 1 and under_repeat:
                    return "a quantifier inside a quantified group"
                if high > _UNBOUNDED:
                    unbounded += 1
                found = walk(body, under_repeat or high > 1)
            elif name == "BRANCH":
                if under_repeat:
                    return "an alternation under a quantifier"
                found = next((f for f in (walk(b, under_repeat) for b in arg[1]) if f), None)
            elif name in ("SUBPATTERN", "ATOMIC_GROUP"):
                found = walk(arg[-1], under_repeat)
            elif name in ("ASSERT", "ASSERT_NOT"):
                found = walk(arg[1], under_repeat)
            elif name == "GROUPREF_EXISTS":
                found = walk(arg[1], under_repeat) or (walk(arg[2], under_repeat) if arg[2] else None)
            else:
                found = None
            if found:
                return found
        return None

    found = walk(_parser.parse(pattern), False)
    if found is None and unbounded > 1:
        found = f"{unbounded} unbounded quantifiers (at most one: '.*', '+', '{{n,}}')"
    return found


def _read_option() -> str | None:
    from airflow_gpu_sched import compat

    return compat.conf.get(SECTION, OPTION, fallback=None)


@lru_cache(maxsize=1)
def patterns() -> Patterns:
    """The built-ins plus the user's, read once per process."""
    return Patterns(user=parse_user_patterns(_read_option()), built_in=_compile_built_in())


def reload() -> None:
    """Forget the cached option (tests, or a long-lived process whose config changed)."""
    patterns.cache_clear()
