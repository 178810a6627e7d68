"""A toy verifiers environment: a taskset whose task has two weighted rewards."""
import verifiers.v1 as vf


class ToyData(vf.TaskData):
    answer: str


class ToyTask(vf.Task[ToyData]):
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        return float(self.data.answer in trace.last_reply)

    @vf.reward(weight=0.25)
    async def used_tool(self, trace: vf.Trace) -> float:
        return float(bool(trace.tool_messages))


class ToyTaskset(vf.Taskset[ToyTask]):
    def load(self):
        for i, a in enumerate(["4", "5"]):
            yield ToyTask(ToyData(prompt=f"what is {i}+4?", answer=a))


__all__ = ["ToyTaskset"]
