"""The bad-input corpus (issue 11): a generator of malformed inputs and their expected errors."""
