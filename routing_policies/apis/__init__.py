"""Old import paths only (see each module): the APIs live in each part's `apis`."""
