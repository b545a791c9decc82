"""Close codes of the browser feeds (the dashboard and alert sockets), after HTTP's 401, 403
and 404: a page can tell why it cannot follow."""

from typing import Final

CLOSE_UNAUTHENTICATED: Final = 4401
CLOSE_FORBIDDEN: Final = 4403
CLOSE_NOT_FOUND: Final = 4404
