"""The application's agent, as a threadwarden binding."""

from threadwarden import AttemptContext, Binding, Completed, Outcome


async def greet(context: AttemptContext) -> Outcome:
    name = str(context.input.get("name", "world"))
    await context.append("message", {"text": f"Hello, {name}!"})
    return Completed({"greeted": name})


bindings = [Binding(agent_id="greeter", digest="greeter-v1", handler=greet)]
