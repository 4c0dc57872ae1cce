"""The port's own export stage, watched from outside its code: levers, sub-steps, fallbacks, and
the hand-over of the decoded asset to an export process."""
