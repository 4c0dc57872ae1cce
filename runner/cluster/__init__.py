"""The folder batch on a Ray cluster (``python -m runner batch DIR -o OUTDIR --cluster ADDRESS``)
and ``python -m runner check --cluster ADDRESS``; docs/cluster.md says how to set one up.

Ray is optional: nothing in this package imports it at module level, and only the ``--cluster``
paths import this package, so the extension and a local batch never need it.

- ``connect``: import Ray, reach the cluster (``cluster_unavailable`` otherwise), list its nodes;
- ``auth``: the cluster's token authentication, settled before Ray is imported (``cluster_auth``
  for a token it requires and does not get);
- ``node``: what runs on a node: one guarded ``python -m runner`` job in a node-local folder,
  its events streamed back, its GLB and trace returned as bytes;
- ``placement``: the task options (the ``image_to_mesh`` slot, ``memory=``) and the decision
  what a failed attempt means (retry elsewhere, or the image's own error);
- ``remote``: one image seen from the head (claim, place, relay, write);
- ``batch``: ``ClusterBatch``, the head side: plan, submit, record, cancel;
- ``check``: ``check --cluster``.
"""

SLOT = "image_to_mesh"
"""The custom Ray resource a node offers, one unit per job it runs at once (``ray start
--resources '{"image_to_mesh": 1}'``); every image's task asks for one."""
