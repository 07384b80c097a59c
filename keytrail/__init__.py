"""keytrail: an event-sourced associative memory for LLM agents."""

__version__ = "0.1.0"
