"""planq package."""
