"""Input of the review pages' forms (the services check notes, states and revisions)."""

from django import forms

from controlplane.pages import PageForm, WholeNumberField

from .models import ChangeRequest


class NoteForm(PageForm):
    """A note (a freeze's acknowledgement, a comment, a verdict's reason)."""

    note = forms.CharField(label="The note", required=False, max_length=2000, strip=False)


class VerdictForm(NoteForm):
    """Approve or reject the revision the reviewer saw."""

    revision = WholeNumberField(label="The revision", minimum=1)


class OpenForm(NoteForm):
    """Put the draft, or a rollout of / switch to a version, up for review."""

    kind = forms.ChoiceField(label="The kind", choices=ChangeRequest.Kind.choices)
    version = WholeNumberField(label="The version", empty=None, minimum=1)


class SettingsForm(PageForm):
    """What of the fleet needs another publisher's approval."""

    publish_needs_approval = forms.BooleanField(required=False)
    rollout_needs_approval = forms.BooleanField(required=False)
