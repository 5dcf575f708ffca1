"""The web console: sessions, a live DAG per session, and the actions a person takes."""
