"""The L2 adapter contract and the helpers an adapter implementation uses.

Results, bitmaps, usage, task queues, the poll loop, the synchronous driver, and the pass-through
mixin of adapters that wrap another.
"""
