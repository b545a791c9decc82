"""Django project of the edge-cloud routing control plane."""

from .celery import app as celery_app

__all__ = ["celery_app"]
