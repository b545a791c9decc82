"""Page routes of the app: each part's, in one list (the API is in `urls`)."""

from .devices import page_urls as devices
from .policies import page_urls as policies
from .reviews import page_urls as reviews
from .rollouts import page_urls as rollouts
from .schedules import page_urls as schedules
from .segments import page_urls as segments

urlpatterns = [
    *policies.urlpatterns,
    *rollouts.urlpatterns,
    *devices.urlpatterns,
    *reviews.urlpatterns,
    *schedules.urlpatterns,
    *segments.urlpatterns,
]
