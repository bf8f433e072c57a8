"""The clusterforge Pulumi program (AWS): one ``ComponentResource`` per concern.

``program.deploy(cluster, secrets=...)`` builds the whole stack from a validated spec and returns
the stack outputs; ``__main__.py`` (what ``pulumi up`` runs) and ``clusterforge plan`` (which runs
it under the engine's mock mode) both call it, so the preview you read offline is the program
that runs.
"""
