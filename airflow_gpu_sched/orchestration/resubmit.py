"""Resubmits for failures that are really the hardware, pure: which failed job is one
(:func:`classify`), from the one table of what such failures say (:data:`BUILT_IN`), and the
operator arguments that turn it on (:func:`policy`: ``resubmit_on``, ``max_failure_resubmits``).

A job that FAILED for its code stays the user's failure (never resubmitted, as before). Only
when the task opts in (``max_failure_resubmits`` > 0; default 0: never) does a FAILED job whose
``error.message`` or failing replica's last log lines match one of ``resubmit_on`` get resubmitted
by the plan's engine (:func:`plan_engine._job_ended`): the same step, the same region, the same
``base_output_dir`` (its checkpoints), a new job; each resubmit is counted in the ledger's attempt
record (``resubmit``: the rule that matched), so the budget holds across Airflow retries.

``resubmit_on`` items (docs/resubmit.md):

- a built-in name from :data:`BUILT_IN` (``"nccl_timeout"``, ``"ecc_error"``, ``"xid"``), or
  ``"hardware"`` for all of them (the default when ``resubmit_on`` is not given);
- an ``int`` 1..255: the exit status Vertex AI names ("The replica workerpool0-0 exited with a
  non-zero status of N");
- any other string: a regular expression (case-insensitive), searched in the message and the
  log tail; refused when it does not compile or could backtrack for ever
  (:func:`failure_patterns.backtracking_risk`).

Matching reads at most :data:`MESSAGE_CAP` characters of the message and the last
:data:`TAIL_CAP` of the log tail.

May import: orchestration; never airflow.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from airflow_gpu_sched.orchestration.failure_patterns import backtracking_risk

MESSAGE_CAP = 4096  # characters of error.message read
TAIL_CAP = 65536  # characters of the log tail read (its end: where the crash is)
MATCH_SHOWN = 160  # characters of the matched text a log line shows
ALL = "hardware"  # every built-in class
EXIT_STATUS = re.compile(r"exited with a non-zero status of (\d{1,3})")  # vertex-ai-samples#1504


@dataclass(frozen=True)
class Known:
    """One built-in class of hardware-shaped failure: its pattern and where the wording is from."""

    pattern: str
    source: str


# The classifier's data: what each failure says and who says it (docs/resubmit.md has the table
# with the sources in full). A job's container sees CUDA and NCCL errors; Xid lines are the
# host kernel's (NVRM), in a job's log only if its code prints them (assumed: Vertex AI puts no
# kernel log in a job's logs).
BUILT_IN: dict[str, Known] = {
    # PyTorch's ProcessGroupNCCL watchdog (pytorch/pytorch#118369, ai2cm/ace#348), then it aborts
    "nccl_timeout": Known(r"Watchdog caught collective operation timeout|"
                          r"Some NCCL operations have failed or timed out",
                          "PyTorch ProcessGroupNCCL log lines: pytorch/pytorch#118369, ai2cm/ace#348"),
    # cudaErrorECCUncorrectable (CUDA runtime API, error 214) as PyTorch raises it
    # (verl-project/verl#407, vllm-project/vllm#5222: "usually means a hardware error")
    "ecc_error": Known(r"uncorrectable ECC error encountered|double[- ]bit ECC",
                       "CUDA cudaErrorECCUncorrectable: verl-project/verl#407, vllm-project/vllm#5222; "
                       "NVIDIA dynamic page retirement (Xid 48 DBE)"),
    # the driver's "NVRM: Xid (PCI:...): <n>, ..." for the Xids NVIDIA's catalog puts on the
    # hardware: 48 DBE, 63/64 page retirement / row remapping, 74 NVLink, 79 fallen off the bus,
    # 92 high single-bit ECC rate, 94/95 contained/uncontained ECC, 119/120 GSP
    "xid": Known(r"Xid \(PCI:[0-9a-fA-F:.]{1,20}\): (?:48|63|64|74|79|92|94|95|119|120)\b|"
                 r"GPU has fallen off the bus",
                 "NVIDIA Xid catalog (docs.nvidia.com/deploy/xid-errors), dynamic page retirement"),
}


class ResubmitSpecError(ValueError):
    """``resubmit_on`` / ``max_failure_resubmits`` is not what it must be (names the field and the rule)."""


@dataclass(frozen=True)
class Rule:
    name: str  # the reason metrics and log lines give: a built-in name, "exit_code_<n>", "pattern"
    regex: re.Pattern | None = None
    exit_code: int | None = None


@dataclass(frozen=True)
class Policy:
    """What a task resubmits: ``rules`` (in order), at most ``budget`` times a training run."""

    rules: tuple[Rule, ...]
    budget: int


@dataclass(frozen=True)
class Verdict:
    kind: Literal["hardware", "user"]
    rule: str | None = None  # the rule that matched (hardware)
    matched: str | None = None  # the text it matched, cut to MATCH_SHOWN
    where: str | None = None  # "the job's error message" | "the failing replica's log"

    @property
    def why(self) -> str:
        if self.kind == "user":
            return "no resubmit_on rule matched: the user's failure"
        return f"{self.rule}: {self.matched!r} in {self.where}"


def policy(resubmit_on: Any, max_failure_resubmits: Any) -> Policy | None:
    """The operator's two arguments, checked -> the policy (None: resubmits off, the default)."""
    if isinstance(max_failure_resubmits, bool) or not isinstance(max_failure_resubmits, int) \
            or not 0 <= max_failure_resubmits <= 100:
        raise ResubmitSpecError(f"max_failure_resubmits: must be an integer 0..100 (got {max_failure_resubmits!r})")
    if max_failure_resubmits == 0:
        if resubmit_on not in (None, [], ()):
            raise ResubmitSpecError("resubmit_on: given, but max_failure_resubmits=0 would resubmit nothing: "
                                    "set max_failure_resubmits to 1 or more (or drop resubmit_on)")
        return None
    items = [ALL] if resubmit_on is None else resubmit_on
    if isinstance(items, (str, int)):
        items = [items]
    if not isinstance(items, (list, tuple)) or not items:
        raise ResubmitSpecError(f"resubmit_on: must be a non-empty list of exit codes (int), built-in names "
                                f"{[ALL, *BUILT_IN]} or regexes (got {resubmit_on!r})")
    rules: list[Rule] = []
    for index, item in enumerate(items):
        for rule in _rules(f"resubmit_on[{index}]", item):
            if rule not in rules:
                rules.append(rule)
    return Policy(tuple(rules), max_failure_resubmits)


def _rules(field: str, item: Any) -> list[Rule]:
    if isinstance(item, bool):
        raise ResubmitSpecError(f"{field}: {item!r} is neither an exit code (int 1..255) nor a string")
    if isinstance(item, int):
        if not 1 <= item <= 255:
            raise ResubmitSpecError(f"{field}: exit code {item} is not 1..255 (a process exit status; 0 is success)")
        return [Rule(f"exit_code_{item}", exit_code=item)]
    if not isinstance(item, str) or not item.strip():
        raise ResubmitSpecError(f"{field}: {item!r} is neither an exit code (int 1..255) nor a non-empty string")
    if item == ALL:
        return [_built_in(name) for name in BUILT_IN]
    if item in BUILT_IN:
        return [_built_in(item)]
    if item.strip().isdigit():
        raise ResubmitSpecError(f"{field}: {item!r}: give an exit code as an int, not a string")
    if len(item) > 500:
        raise ResubmitSpecError(f"{field}: a pattern of {len(item)} characters (at most 500)")
    try:
        regex = re.compile(item, re.I)
    except re.error as exc:
        raise ResubmitSpecError(f"{field}: {item!r} is not a valid regex: {exc}") from None
    risk = backtracking_risk(item)
    if risk:
        raise ResubmitSpecError(f"{field}: {item!r} is refused: {risk} (it could backtrack for minutes)")
    return [Rule("pattern", regex=regex)]


def _built_in(name: str) -> Rule:
    return Rule(name, regex=re.compile(BUILT_IN[name].pattern, re.I))


def exit_status(message: str | None) -> int | None:
    """The exit status Vertex AI's message names, or None."""
    found = EXIT_STATUS.search((message or "")[:MESSAGE_CAP])
    return int(found.group(1)) if found else None


def classify(rules: Policy | tuple[Rule, ...] | None, message: str | None, log_tail: str | None = None) -> Verdict:
    """A FAILED job's error -> ``hardware`` (a rule matched: which, and what) or ``user``."""
    if rules is None:
        return Verdict("user")
    rules = rules.rules if isinstance(rules, Policy) else rules
    text = (message or "")[:MESSAGE_CAP]
    tail = (log_tail or "")[-TAIL_CAP:]
    code = exit_status(text)
    for rule in rules:
        if rule.exit_code is not None:
            if code == rule.exit_code:
                return Verdict("hardware", rule.name, f"exit status {code}", "the job's error message")
            continue
        for where, haystack in (("the job's error message", text), ("the failing replica's log", tail)):
            found = rule.regex.search(haystack) if haystack else None
            if found:
                return Verdict("hardware", rule.name, found.group(0)[:MATCH_SHOWN], where)
    return Verdict("user")
