"""Pages of the policy editor."""

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from . import selectors


@login_required
def fleet_list_page(request: HttpRequest) -> HttpResponse:
    """Fleets."""
    return render(request, "routing_policies/fleet_list.html", {"fleets": selectors.fleet_list()})
