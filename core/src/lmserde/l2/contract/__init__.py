"""The L2 adapter contract and the helpers an adapter implementation uses.

Results, bitmaps, usage, task queues, the poll loop, the synchronous driver, the pass-through
mixin of adapters that wrap another, and the machinery of network adapters (task deadlines, the
I/O thread pool, service health).
"""
