"""The built-in device plugins. Each imports only the public ``sdk`` API."""
