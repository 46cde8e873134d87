# rule: process_spawn
# marker: pwned_f3_writer
# Family 3: a subclass of a matplotlib movie writer chooses the argv the
# writer starts its program with.
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.animation import FFMpegWriter, FuncAnimation


class Writer(FFMpegWriter):
    def _args(self):
        return ["sh", "-c", "echo ran > pwned_f3_writer; cat > /dev/null"]


fig = plt.figure()
animation = FuncAnimation(fig, lambda i: [], frames=1)
try:
    animation.save("out.mp4", writer=Writer())
except Exception:
    pass
