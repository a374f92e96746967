"""torch's float32 matmul against oneDNN's (`model.cpu_linear`) on a model's Linear shapes, on this CPU. (the code: `rbctl.tools.bench_cpu_linear`)."""

from rbctl.tools.bench_cpu_linear import main

if __name__ == "__main__":
    raise SystemExit(main())
