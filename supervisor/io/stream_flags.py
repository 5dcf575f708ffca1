"""How a session says its first plan is still streaming (session/loop.py, io/rebuild.py)."""

PLANNING_FIELD = "planning"  # session hash field: the first plan's reply had not ended
STREAMING = "streaming"
STREAMED_REASON = "planning streams"  # how a version installed mid-stream's reason starts
