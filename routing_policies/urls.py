"""API routes of the app, mounted under /api/v1/: each part's, in one list."""

from .broker_access import urls as broker_access
from .devices import urls as devices
from .mqtt import urls as mqtt
from .policies import urls as policies
from .reviews import urls as reviews
from .rollouts import urls as rollouts
from .schedules import urls as schedules
from .segments import urls as segments

urlpatterns = [
    *policies.urlpatterns,
    *devices.urlpatterns,
    *rollouts.urlpatterns,
    *reviews.urlpatterns,
    *schedules.urlpatterns,
    *segments.urlpatterns,
    *broker_access.urlpatterns,
    *mqtt.urlpatterns,
]
