"""The Pixal3D-mac port itself: find and import it, check its sources and names against the
commits this adapter was read against, and the port's own options and switches."""
