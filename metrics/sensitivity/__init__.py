"""What fools a judge (issue #39): controlled perturbations of captions, and the paired score shifts they cause."""
