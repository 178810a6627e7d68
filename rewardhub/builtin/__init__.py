"""Built-in rewards, registered from ``DEFAULT_PLUGINS`` so they can never be missing."""
