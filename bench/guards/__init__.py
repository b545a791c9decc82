"""bench/guards: false rollbacks and time to catch a bad candidate, statistical vs fixed guards."""
