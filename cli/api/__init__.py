"""The admin HTTP API and dashboard (`planq api`): the CLI's operations over HTTP.

`cli.api.app.create_api` builds the app. Nothing is imported here, so `planq --help` does
not load FastAPI.
"""
