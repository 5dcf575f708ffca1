"""One session's loop and the collaborators it runs: schedule, decide, change, end."""
