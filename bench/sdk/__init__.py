"""Routing cost of the SDK's `Router.route` against the seed's `TaskRouter.route`."""
