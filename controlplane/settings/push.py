"""The push tier: the channel layer between processes and the reconcile loop of each."""

from controlplane.settings.env import REDIS_URL, from_environment

if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # redis-py 8 reads with a 5 s socket timeout by default, the same as the layer's
            # blocking pop: a consumer idle for 5 s then died with "Timeout reading".
            "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 30}]},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# Each ASGI process re-reads its fleets' assignments this often and pushes what a lost Redis
# message left out (routing_policies/push.py); also at once when its subscription comes back.
PUSH_RECONCILE_S: float = 60.0

# Policy deltas (docs/PROTOCOL.md, "Policy deltas"): the control plane makes a delta only between
# versions at most this many numbers apart; a device on an older version gets the whole document.
POLICY_DELTA_WINDOW: int = 16

from_environment(globals())
