"""`manage.py seed_demo`: create the demo fleet and users; safe to run again."""

from typing import Any

from django.core.management.base import BaseCommand

from routing_policies.demo import DEMO_USERS, demo_seed


class Command(BaseCommand):
    """Create the demo fleet and one user per role (idempotent)."""

    help = "Create the demo fleet (published v1) and the demo users; does nothing when present."

    def handle(self, *args: Any, **options: Any) -> None:
        created = demo_seed()
        if options["verbosity"] == 0:  # `make run`: its banner names the logins
            return
        if created:
            self.stdout.write("Created: " + ", ".join(created))
        else:
            self.stdout.write("Demo data already present.")
        logins = ", ".join(f"{name} / {password}" for name, (_, password) in DEMO_USERS.items())
        self.stdout.write(f"Demo logins: {logins}")
