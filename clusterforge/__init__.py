"""clusterforge: one typed cluster spec -> AWS infrastructure, host configuration and Slurm/NCCL configs.

Data flows one way (README, "Architecture"):

* ``clusterspec``: the pydantic spec, its loader and the validation rules;
* ``catalog`` (and ``catalog.facts``): hardware profiles and facts discovered on real hosts;
* ``resolve``: load -> validate -> resolve, once, into the ``ResolvedCluster`` every consumer takes;
* ``render``: the one renderer (files + the typed ``manifest``) and the one restart policy (``restart``);
* ``check``, ``diff``, ``plan``, ``inventory``, ``configure``, ``local``: the verbs, each reading the
  resolved cluster or the manifest, never rendered config text;
* ``aws``, ``hostlist``, ``proc``, ``errors``: shared AWS layout facts, the hostlist codec, the
  subprocess helper and the errors the CLI reports as one message.
"""
