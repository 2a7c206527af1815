"""A synthetic multi-user VR edge-rendering workload.

`synthetic_env.SyntheticVREdgeEnv` is the Gymnasium environment; `baselines` holds
hand-written batched policies to compare learned ones against. Nothing here reads data
files or talks to external services.
"""
