"""The decision agent: a situation report in, what to do about it (a ReplanDecision) out."""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass

from planloop.planner.decision import ReplanDecision
from planloop.planner.llm import ChatModel, Role, Usage
from planloop.planner.prompting import bullets, render_prompt
from planloop.planner.situation import Situation, render_situation

logger = logging.getLogger(__name__)

# Size budget of the situation report inside decider prompts, characters.
DECIDER_SITUATION_CHARS = 6000


@dataclass
class Decider:
    """The decision agent: situation report in, :class:`ReplanDecision` out.

    Attributes:
        chat: The model.
    """

    chat: ChatModel

    def decide(
        self, situation: Situation, *, sensitive: Collection[str] = ()
    ) -> tuple[ReplanDecision, Usage]:
        """What to do about the situation.

        ``steps_to_cancel`` is cleaned of ids that are not open steps of the situation, so
        the supervisor never cancels a completed or unknown step.

        Raises:
            LLMError: the endpoint failed or kept answering unusable JSON.
        """
        cancellable = [s.id for s in situation.open_steps]
        messages = render_prompt(
            "decider",
            situation=render_situation(
                situation, budget_chars=DECIDER_SITUATION_CHARS, sensitive=sensitive
            ),
            cancellable=bullets(cancellable),
            replans_left=str(situation.replans_left),
            max_replans=str(situation.max_replans),
        )
        decision, usage = self.chat.complete_json(Role.DECIDER, messages, ReplanDecision)
        wanted = list(dict.fromkeys(decision.steps_to_cancel))
        allowed = [s for s in wanted if s in cancellable]
        if allowed != decision.steps_to_cancel:
            logger.info(
                "decider named steps that cannot be cancelled: %s",
                sorted(set(wanted) - set(allowed)),
            )
            decision = decision.model_copy(update={"steps_to_cancel": allowed})
        return decision, usage
