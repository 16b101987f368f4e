"""Where agent runtimes plug in: providers' tool calls in, Lockgate's answers out in their shapes.

    outcome = await providers.propose_response(turn, "anthropic.messages", body)
    messages += [{"role": "assistant", "content": json.loads(body)["content"]}, *outcome.messages()]

Four formats (``PROVIDERS``): ``openai.chat``, ``openai.responses``,
``anthropic.messages``, ``gemini``. Calls are read from the response's bytes (the
argument text exactly as sent), get deterministic call ids, and keep the provider's
item as evidence; a streamed call exists only once its item is done (``stream``).
"""

from lockgate.client.providers.calls import (
    FAILURES,
    MAX_ARGUMENTS_BYTES,
    MAX_FAILURE_TEXT_BYTES,
    MAX_ITEM_BYTES,
    PROVIDERS,
    Draft,
    ParsedResponse,
    ProviderCall,
    ProviderError,
    provider_tool_name,
)
from lockgate.client.providers.formats import RESULT_LABEL, model_content
from lockgate.client.providers.loop import (
    Answer,
    Outcome,
    Proposer,
    parse_response,
    propose_assembled,
    propose_calls,
    propose_response,
    propose_stream,
    stream,
    tool_declarations,
)
from lockgate.client.providers.streams import (
    AnthropicStream,
    ChatStream,
    ResponsesStream,
    StreamAssembly,
)

__all__ = [
    "FAILURES",
    "MAX_ARGUMENTS_BYTES",
    "MAX_FAILURE_TEXT_BYTES",
    "MAX_ITEM_BYTES",
    "PROVIDERS",
    "RESULT_LABEL",
    "AnthropicStream",
    "Answer",
    "ChatStream",
    "Draft",
    "Outcome",
    "ParsedResponse",
    "Proposer",
    "ProviderCall",
    "ProviderError",
    "ResponsesStream",
    "StreamAssembly",
    "model_content",
    "parse_response",
    "propose_assembled",
    "propose_calls",
    "propose_response",
    "propose_stream",
    "provider_tool_name",
    "stream",
    "tool_declarations",
]
