"""`loom.pipeline`: a script's own model split into pipeline stages over the job's ranks.

    job = loom.distributed.init()
    model = torch.nn.Sequential(...)                  # the whole model, built on every rank
    pipe = loom.pipeline.Pipeline(model, loss_fn=my_loss, microbatches=8, schedule="1f1b")
    optimizer = torch.optim.AdamW(pipe.parameters())  # this rank's stages only
    for x, y in batches:
        loss = pipe.step(x, y)      # every rank; the first stage's rank reads x and y
        optimizer.step()

Run it with `loom launch --nproc-per-node P -- python3 train.py` (P x D ranks run D pipelines of
P ranks, the stages' gradients averaged over the D pipelines). The schedule (gpipe, 1f1b,
interleaved, zb_h1 or a CSV file of torch.distributed.pipelining's actions) is generated,
validated and simulated as `loom pipeline plan` does, and Loom's executor runs it: activations
of any shape go to the next stage's rank and the targets travel with them to the last stage,
which computes `loss_fn(output, targets)`; input gradients come back. Each rank keeps only its
own stages' tensors.
"""

import torch

from . import _loom, _native, _placement, distributed

__all__ = ["Pipeline"]


class Pipeline:
    """A model's stages on this job's ranks, run by a pipeline schedule.

    Args:
        stages: either a torch.nn.Sequential holding the whole model (every rank builds it; its
            children are split into consecutive stages by `split`, and each rank keeps its own
            stages' tensors and releases the rest), or a list of this rank's own stage modules
            (stage s runs on pipeline rank s % P, so rank r passes stages r, r + P, ...; with
            more than one, the schedule interleaves them). A CSV schedule that places stages
            otherwise needs the Sequential form.
        loss_fn: loss_fn(output, targets) -> a one-element tensor: the mean loss of one
            micro-batch. The step's loss is the mean over the micro-batches, so with a mean
            loss the gradients are those of the whole batch.
        microbatches: micro-batches a step; the step's batch must split into equal ones.
        schedule: "gpipe", "1f1b", "interleaved", "zb_h1" or a CSV file's path.
        split: children of the Sequential per stage (default: as even as can be).
        chunks: stages per rank for a Sequential (default 2 for "interleaved", else 1).
        pipeline_ranks: ranks per pipeline, P (default: every training rank, one pipeline).
        job: the loom.distributed Job (default: the one init() joined).
        bucket_mb, first_bucket_mb: bucket sizes of the gradient exchange between pipelines.

    Raises loom.ConfigError naming the argument when the layout, schedule or split cannot be
    (1f1b needs micro-batches >= ranks, for one).
    """

    def __init__(self, stages, *, loss_fn, microbatches=4, schedule="1f1b", split=None,
                 chunks=None, pipeline_ranks=None, job=None, bucket_mb=25.0,
                 first_bucket_mb=1.0):
        job = job if job is not None else distributed.current()
        ranks = int(pipeline_ranks) if pipeline_ranks else job.trainers
        if isinstance(stages, torch.nn.Sequential):
            self._modules = stages
            blocks = [(name, child, list(child.named_parameters(prefix=name)),
                       list(child.named_buffers(prefix=name)))
                      for name, child in stages.named_children()]
            if chunks is None:
                chunks = 2 if schedule == "interleaved" else 1
            set_train = stages.train
        else:
            own = list(stages)
            if not own or not all(isinstance(m, torch.nn.Module) for m in own):
                raise _loom.ConfigError("stages: a torch.nn.Sequential, or a list of this "
                                        "rank's stage modules")
            self._modules = torch.nn.ModuleList(own)
            chunks = len(own)
            blocks = self._stage_list_blocks(own, ranks, job.rank % ranks if ranks else 0)
            split = [1] * (ranks * chunks)
            set_train = self._modules.train
        self._impl = _native.attach(self, _loom.ScriptPipeline(
            job, type(stages).__name__, blocks, set_train, loss_fn, str(schedule),
            int(microbatches), ranks, int(chunks), list(split or []), float(first_bucket_mb),
            float(bucket_mb)))
        # loom.profile.Steps handed the Sequential (or a stage module) accounts the pipeline.
        for module in (stages,) if isinstance(stages, torch.nn.Sequential) else own:
            _native.wraps(self, module)
        self.last_samples = 0

    @staticmethod
    def _stage_list_blocks(own, ranks, pipeline_rank):
        # Stage s is named "s" (its tensors "s.<name>", as in torch.nn.Sequential(*stages)); the
        # stages of other ranks are placeholders this rank never runs.
        blocks = []
        for stage in range(ranks * len(own)):
            if stage % ranks != pipeline_rank:
                blocks.append((str(stage), None, [], []))
                continue
            module = own[stage // ranks]
            blocks.append((str(stage), module, list(module.named_parameters(prefix=str(stage))),
                           list(module.named_buffers(prefix=str(stage)))))
        return blocks

    def step(self, inputs=None, targets=None):
        """Runs one step of the schedule on this rank's stages and returns the step's mean loss
        (on every rank of the pipeline). The gradients of this rank's stages are cleared first
        and left for the script's optimizer. `inputs` and `targets` (split along their first
        dimension into the micro-batches) are read on the pipeline's first rank only."""
        loss, self.last_samples = self._impl.step(inputs, targets)
        return loss

    def parameters(self):
        """This rank's stages' parameters (what its optimizer steps)."""
        return [p for _, p in self._impl.parameters()]

    def named_parameters(self):
        """This rank's stages' parameters under the model's names."""
        return list(self._impl.parameters())

    def named_buffers(self):
        return list(self._impl.buffers())

    def state_dict(self):
        """This rank's stages' parameters and buffers under the model's names."""
        return {name: t.detach() for name, t in self.named_parameters() + self.named_buffers()}

    def clip_grad_norm_(self, max_norm):
        """Scales the gradients so that their norm over every stage of the pipeline is at most
        `max_norm`, as torch.nn.utils.clip_grad_norm_ does in one process (collective)."""
        self._impl.clip_gradients(float(max_norm))

    def _placement(self):
        # loom.checkpoint's view of the stages (loom/_placement.py).
        return _placement.Stages(self._impl)

    @property
    def stages(self):
        """This rank's stage indices."""
        return list(self._impl.own_stages)

    @property
    def num_stages(self):
        return self._impl.stages

    @property
    def is_first(self):
        """Whether this rank runs stage 0, and so reads the step's batch."""
        return self._impl.pipeline_rank == 0

    @property
    def is_last(self):
        """Whether this rank runs the last stage, which computes the loss."""
        return self._impl.stages - 1 in self._impl.own_stages

    @property
    def replica(self):
        """This rank's pipeline (0 .. replicas-1): the share of the data its first rank reads."""
        return self._impl.replica

    @property
    def replicas(self):
        """Pipelines in the job (D)."""
        return self._impl.replicas

    @property
    def simulated_bubble(self):
        """The schedule's idle share, simulated with equal stage times."""
        return self._impl.simulated_bubble

    def describe(self):
        """The schedule, each stage's blocks and rank, and the simulated bubble, in words."""
        return self._impl.describe()

    def close(self):
        """After the last step: the pipelines end with the same parameters."""
        self._impl.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self.close()

    def __repr__(self):
        return f"Pipeline({self.describe()})"
