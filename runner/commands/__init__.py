"""The runner's commands as a person types them: one image, ``batch``, ``check``, ``export``;
their argument parsers and the terminal view of the event stream."""
