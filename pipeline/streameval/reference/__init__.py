"""Paper reproductions the service does not run: Žliobaitė et al.'s own Algorithm 1 and
temporal diagnostics (:mod:`~streameval.reference.temporal`) and Gama et al.'s sample-size
rules (:mod:`~streameval.reference.sample_size`). They check the core against the papers'
numbers and help choose a window or a fading factor; like the core, they are pure numpy."""
