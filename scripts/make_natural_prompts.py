"""Write pytest_glm5/load/datasets/natural.jsonl: the bundled prompt set of natural text that speculative decoding is
judged on (load/datasets.py). 24 GSM8K-style word problems (correctness.questions' generator, seed 5, with its
instruction) and 24 chat turns of two or three paragraphs, written for this project. Licence: CC0 1.0 (public
domain dedication): the text is ours, no dataset's.

    python scripts/make_natural_prompts.py    # rewrites the file; its digest is the workload's (a change re-keys it)
"""

from __future__ import annotations

import json
from pathlib import Path

from pytest_glm5.correctness.questions import generate

OUT = Path(__file__).resolve().parents[1] / "pytest_glm5" / "load" / "datasets" / "natural.jsonl"

# (context paragraph, the ask): each chat turn is a situation described in prose, then a request about it.
SITUATIONS = (
    ("Our team runs a small bakery in a coastal town. In summer the shop is full from seven in the morning until "
     "noon, but in winter we often throw away a third of the bread we bake because the streets are empty after "
     "the tourists leave.",
     ("Suggest a plan to cut the waste in winter without losing the regular customers who come every morning.",
      "Write a short, friendly note for the shop window that explains why some shelves will be empty after ten.",
      "What numbers should we track each week to know whether a new baking schedule is working?")),
    ("I am learning to play the piano at forty-five. I practice for thirty minutes most evenings, and I can read "
     "simple music, but my left hand is much slower than my right and I get frustrated when a piece falls apart "
     "in the same bar every time.",
     ("How should I structure a practice session so that the left hand catches up?",
      "Explain, in plain words, why slowing a difficult passage down helps more than repeating it at full speed.",
      "Recommend three pieces that are good for a patient adult beginner and say what each one teaches.")),
    ("A city council wants to replace the old bus routes with a network of frequent lines that meet at a few "
     "transfer points. Some residents like the idea because buses would come every ten minutes. Others worry that "
     "they will have to change buses for trips that are direct today.",
     ("Summarize the trade-off between frequency and direct trips for a resident who has five minutes to read.",
      "List the questions the council should answer before it decides, and explain why each one matters.",
      "Write a balanced paragraph for the local newspaper that presents both views fairly.")),
    ("Our open-source project has grown from two maintainers to about thirty regular contributors in one year. "
     "Pull requests now wait a week for review, the test suite takes forty minutes, and new contributors often "
     "do not know who owns which part of the code.",
     ("Propose a review process that shortens the wait without lowering the quality of what is merged.",
      "Draft a welcome guide for new contributors that explains how to find an issue and who to ask for help.",
      "Which parts of a forty-minute test suite would you look at first to make it faster, and why?")),
    ("My grandmother kept a garden for sixty years. She planted tomatoes next to basil, never grew potatoes in "
     "the same bed two years in a row, and covered the soil with straw in autumn. I have inherited the garden and "
     "want to keep it the way she did, but I do not know the reasons behind her habits.",
     ("Explain the likely reasons behind each of her habits in the language of a gardening book for beginners.",
      "Make a simple calendar for the first year that follows her way of gardening season by season.",
      "What mistakes do new gardeners usually make with an old, well-kept garden, and how can I avoid them?")),
    ("A hospital ward has noticed that patients sleep badly. Lights are switched on for checks at night, alarms "
     "on machines beep often, and the nurses' station is next to the rooms. The staff want to improve sleep "
     "without making care less safe.",
     ("Suggest changes that could improve sleep while keeping every necessary check.",
      "Write a short explanation for patients and families about why some checks still happen at night.",
      "How could the ward measure whether patients sleep better after the changes?")),
    ("I have saved enough money to take three months off work. I would like to travel slowly through a few "
     "countries by train, learn some of a new language, and come back with a clearer idea of what I want to do "
     "next in my career.",
     ("Help me plan the three months so that travel, study and reflection each get enough time.",
      "What questions should I ask myself during the trip to think clearly about my next job?",
      "Write a kind message to my manager explaining why I am taking this break and when I will return.")),
    ("Our school library has a small budget and many old books that nobody borrows. Students mostly come to the "
     "library to study together and to use the computers, and the librarian would like it to become the place "
     "where students discover reading again.",
     ("Propose five low-cost ideas that could bring students back to reading.",
      "How should the librarian decide which old books to keep and which to give away?",
      "Write an invitation to a first reading club meeting that a teenager would actually want to attend.")),
)


def main() -> None:
    """Write the file."""
    rows = [{"prompt": q.prompt, "kind": "gsm8k-style"} for q in generate(24, seed=5)]
    rows += [{"prompt": f"{context}\n\n{ask}", "kind": "chat"} for context, asks in SITUATIONS for ask in asks]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    print(f"{OUT}: {len(rows)} prompts")


if __name__ == "__main__":
    main()
