"""What a change request's verdicts add up to, at the revision its version has now."""

from collections.abc import Iterable
from dataclasses import dataclass

from .models import ChangeRequest, ChangeRequestVerdict


@dataclass(frozen=True, slots=True, kw_only=True)
class ReviewStatus:
    """`approved`, `rejected` or `pending` at `revision`, with who said so; approvals of earlier
    revisions are `withdrawn` (the draft was edited after them)."""

    status: str
    revision: int | None
    approved_by: list[str]
    rejected_by: list[str]
    withdrawn: list[str]


def current_revision(change_request: ChangeRequest) -> int | None:
    """The revision of the request's version now (None once its draft was discarded)."""
    version = change_request.version
    return version.revision if version is not None else None


def review_status(
    change_request: ChangeRequest, verdicts: Iterable[ChangeRequestVerdict]
) -> ReviewStatus:
    """A rejection at the current revision outweighs approvals of it; a verdict of an earlier
    revision counts for nothing (approvals of it are listed as withdrawn)."""
    revision = current_revision(change_request)
    approved, rejected, withdrawn = [], [], []
    for verdict in verdicts:
        if verdict.reviewer_id is not None and verdict.reviewer_id == change_request.author_id:
            continue  # never stored (refused), kept out in case of a renamed user
        if verdict.revision != revision:
            if verdict.verdict == ChangeRequestVerdict.Verdict.APPROVED:
                withdrawn.append(f"{verdict.reviewer_name} (revision {verdict.revision})")
            continue
        if verdict.verdict == ChangeRequestVerdict.Verdict.APPROVED:
            approved.append(verdict.reviewer_name)
        else:
            rejected.append(verdict.reviewer_name)
    status = "rejected" if rejected else "approved" if approved else "pending"
    return ReviewStatus(
        status=status,
        revision=revision,
        approved_by=approved,
        rejected_by=rejected,
        withdrawn=withdrawn,
    )
