"""``--working-memory lean``: each stage's working memory (its temporaries, beyond the weights)
cut where the port's code makes it — the conditioning, the flow models' attention, the decoders —
to the same numbers, and Metal's hard limit."""
