"""Report: how results reach people (terminal tables, JSON)."""
