"""The step-time model: how long one step of a compiled program takes on
its target, read from the executable alone. A step's figure is made in
four parts, one module each, and the report keeps each part's source.

1. **The chip** (`profiles`, `profiles.json`): peak dense bf16 FLOP/s, HBM
   bytes and bandwidth, a TPU's clock, and each link's one-way bandwidth
   `W` and latency `a` per ring step, every number with its source; a CPU
   host's measured numbers where `irshard calibrate` saved them.

2. **An instruction's compute** (`costs`, `rates`): its flops and the bytes
   it reads and writes, counted as XLA's cost analysis counts them, at the
   rates of the profile (`Rates`: measured curves by size where present,
   else the peak):

       t = overhead + max(flops / F, bytes / B_hbm)

   On a TPU an instruction libtpu's cost model estimates instead takes
   `t = estimated_cycles / clock_hz`, and a Pallas kernel the
   `CostEstimate` it declares; what has nothing to read its arithmetic
   from takes its memory traffic alone, a lower bound the step counts
   apart.

3. **A collective's time** (`links`): the slowest link its replica groups
   cross (ICI or DCN on a TPU, NVLink or InfiniBand on a GPU, the host's
   memory on simulated CPU devices) and the ring model on it, e.g.

       all-gather, reduce-scatter   T = a (n-1) + wire / B
       all-reduce                   T = 2 a (n-1) + wire / B

   with `wire` the bytes one device sends and `B` the bandwidth the ring
   gets (`W` per torus dimension it spans, doubled with wraparound).

4. **The step** (`schedule`): the entry computation walked in the order
   XLA scheduled it, with a compute stream and collective streams (on a
   TPU one per set of torus links). Compute instructions run one after
   another (part 2); a synchronous collective stops compute until it ends
   (exposed); an async pair's collective runs beside the compute between
   its start and done, which waits only for what is left; a loop runs its
   body its trip count of times and a conditional costs its costliest
   branch (`controlflow`). Then

       step = launch + compute + exposed communication

   with `launch` the runtime's start of an execution (measured on CPU and
   GPU hosts), `compute` the sum of part 2 over every instruction run, and
   the exposed communication what of part 3 no compute hid. The step also
   keeps its compute by source (`libtpu-estimate`, `kernel-estimate`,
   `roofline`, `traffic-only`, `loop-trips`) and by kind, and its
   communication by mesh axes, exposed and overlapped.

`links.roofline` bounds the same step from the whole program's flops,
bytes and communication: between the largest of the three (all
overlapped) and their sum (none overlapped).

May import `irshard.core`, `irshard.backend` and `irshard.xla`.
"""
