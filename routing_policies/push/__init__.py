"""The push tier: device sockets (`consumer`), the process's hub (`hub`), messages between
processes (`publish`), every frame and message (`frames`), and the batched device writes
(`store`). How a push travels and what it costs: docs/capacity.md."""
