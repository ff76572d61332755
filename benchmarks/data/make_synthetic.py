"""Generate ``synthetic_locomo.json``: invented multi-session conversations in the LoCoMo JSON layout.

Everything here is written for this project (names, events, wording); nothing is taken from a public
benchmark. Each speaker lives through events drawn from the catalogue below; every event is one turn of
the conversation and one observation (``[fact, dia_id]``), and most events get a question that asks for it
in other words than the observation uses (so lexical matching alone is not enough), often with a rare word
in common (so meaning alone is not enough either). Some events happen twice with different values (a move,
a new job), so the newer fact must win. Category 5 questions (unanswerable) are included and must be skipped.

    python -m benchmarks.data.make_synthetic            # rewrites benchmarks/data/synthetic_locomo.json
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta
from pathlib import Path

OUT = Path(__file__).with_name("synthetic_locomo.json")

NAMES = ["Ilsa", "Marek", "Tove", "Oren", "Priya", "Quentin", "Rhea", "Soren", "Talia", "Umar", "Vesna", "Wendel",
         "Xiomara", "Yusuf", "Zelda", "Anouk", "Bram", "Cosima", "Dario", "Elin", "Fenna", "Gideon", "Halvard",
         "Imke", "Jorun", "Kasimir", "Liesel", "Mattias", "Nadia", "Olwen", "Pavel", "Runa", "Sefa", "Tobiah",
         "Ulla", "Viggo", "Wilma", "Yannick", "Zora", "Aurel"]

# kind: (observation, first-person line, question, category, cues, details)
# {n} the speaker, {v} a cue the question mentions (often in other words), {w} the detail it asks for.
# Category 4 single-hop, 2 temporal ("when"), 3 inference; multi-hop (1) questions are built below.
EVENTS: dict[str, tuple[str, str, str, int, list[str], list[str]]] = {
    "pet": ("{n} adopted a {v} named {w} from the animal shelter.", "We adopted a {v} from the shelter, called {w}!",
            "What did {n} call the {v} they brought home?", 4,
            ["beagle puppy", "grey tabby cat", "rescue greyhound", "lop-eared rabbit", "parrot", "border collie"],
            ["Biscuit", "Juniper", "Pepper", "Moss", "Tofu", "Captain", "Olive"]),
    "city": ("{n} moved to {v} for {w}.", "Big news, I moved to {v} because of {w}.",
             "Why did {n} relocate to {v}?", 4,
             ["Lisbon", "Tallinn", "Montreal", "Osaka", "Valparaiso", "Ghent", "Leipzig", "Bergen", "Porto"],
             ["a new job", "their partner", "cheaper rent", "a university place", "the climate"]),
    "job": ("{n} started working as a {v} at {w}.", "I started as a {v} at {w}, first week done.",
            "Where does {n} work as a {v}?", 4,
            ["ferry mechanic", "school librarian", "sound engineer", "hospital pharmacist", "bakery manager",
             "bicycle courier", "museum archivist", "park ranger"],
            ["the harbour", "a small startup", "the city council", "a family firm", "the university"]),
    "craft": ("{n} signed up for {v} classes taught by {w}.", "I signed up for {v} classes, the teacher is {w}.",
              "Who teaches the {v} lessons {n} takes?", 4,
              ["pottery", "watercolour", "woodcarving", "stained glass", "bookbinding", "linocut printing"],
              ["an old neighbour", "a retired sculptor", "a young artist", "their aunt", "a monk"]),
    "sport": ("{n} joined a {v} club and trains on {w}.", "I joined a {v} club, we train on {w}.",
              "On which days does {n} go to {v} practice?", 4,
              ["rowing", "ultimate frisbee", "fencing", "handball", "bouldering", "water polo", "badminton"],
              ["Mondays", "Tuesday evenings", "Saturday mornings", "Thursdays", "Sundays"]),
    "trip": ("{n} went on holiday to {v} and {w}.", "Just got back from {v}, we {w}.",
             "When did {n} take the trip to {v}?", 2,
             ["Iceland", "the Dolomites", "Crete", "Hokkaido", "Patagonia", "the Faroe Islands", "Morocco", "Sicily"],
             ["saw the northern lights", "hiked every day", "ate far too much", "got badly sunburnt",
              "camped by a lake"]),
    "instrument": ("{n} is learning the {v} with {w}.", "I've been practising the {v} with {w}.",
                   "Who is helping {n} learn the {v}?", 4,
                   ["cello", "banjo", "clarinet", "accordion", "ukulele", "harp", "trombone"],
                   ["online videos", "a private tutor", "their grandfather", "a community band"]),
    "allergy": ("{n} found out they are allergic to {v} after {w}.", "Turns out I'm allergic to {v}, found out after {w}.",
                "Which food should {n} keep off their plate?", 3,
                ["peanuts", "shellfish", "sesame", "kiwi fruit", "walnuts", "mustard"],
                ["a restaurant dinner", "a skin test", "a wedding buffet", "a picnic"]),
    "book": ("{n} is reading '{v}' recommended by {w}.", "I'm reading '{v}', {w} recommended it.",
             "Who suggested the novel '{v}' to {n}?", 4,
             ["The Salt Orchard", "Nine Lanterns", "A Map of Quiet Rooms", "The Copper Meridian", "Winter Ledger",
              "Glass Tides"],
             ["a coworker", "their book club", "a librarian", "their brother"]),
    "sibling": ("{n}'s sister {v} is getting married in {w}.", "My sister {v} is getting married in {w}!",
                "Where is the wedding of {n}'s sister {v}?", 4,
                ["Maren", "Hedda", "Lucia", "Noor", "Ottilie", "Greta"],
                ["a vineyard", "a lighthouse", "the town hall", "a mountain hut", "a castle"]),
    "diet": ("{n} went {v} because of {w}.", "I went {v}, mostly because of {w}.",
             "Why did {n} change the way they eat?", 3,
             ["vegetarian", "vegan", "pescatarian", "dairy-free"],
             ["a documentary", "their doctor's advice", "climate worries", "a bet with a friend"]),
    "garden": ("{n} is growing {v} in {w}.", "My {w} is full of {v} now.",
               "What plants does {n} have in {w}?", 4,
               ["cherry tomatoes", "chillies", "strawberries", "basil and mint", "sunflowers", "dahlias"],
               ["the allotment", "window boxes", "a greenhouse", "the back yard"]),
    "injury": ("{n} sprained their {v} while {w}.", "I sprained my {v} while {w}, ouch.",
               "How did {n} hurt their {v}?", 4, ["ankle", "wrist", "knee", "shoulder"],
               ["hiking", "dancing at a wedding", "playing football", "moving furniture", "skiing"]),
    "course": ("{n} enrolled in an evening course on {v} at {w}.", "I enrolled in a {v} evening course at {w}.",
               "Where is {n} taking classes in {v}?", 4,
               ["marine biology", "Japanese", "accounting", "astronomy", "Italian cooking", "data analysis",
                "first aid"],
               ["the adult college", "the library", "a community centre", "the observatory"]),
    "vehicle": ("{n} bought a second-hand {v} for {w}.", "Bought a used {v}, it was {w}.",
                "How much did {n} pay for the {v}?", 4,
                ["camper van", "electric scooter", "cargo bike", "vintage Volvo", "motorcycle", "sailing dinghy"],
                ["almost nothing", "two months' salary", "a bargain price", "far too much"]),
    "volunteer": ("{n} volunteers at a {v} with {w}.", "Weekends I help out at a {v} with {w}.",
                  "With whom does {n} help at the {v}?", 4,
                  ["food bank", "wildlife rescue centre", "homeless shelter", "literacy charity", "repair cafe"],
                  ["their mother", "old school friends", "coworkers", "their kids"]),
    "fear": ("{n} is afraid of {v} since {w}.", "Honestly {v} have terrified me since {w}.",
             "Since when has {n} been frightened of {v}?", 2,
             ["spiders", "deep water", "heights", "thunderstorms", "crowds", "wasps"],
             ["childhood", "a bad holiday", "a film they saw", "an accident"]),
    "baby": ("{n}'s partner is expecting a baby and they plan to call it {w} if it is a {v}.",
             "We're expecting! If it's a {v} we'll call it {w}.",
             "What name has {n} picked if the baby is a {v}?", 4,
             ["girl", "boy"], ["Ada", "Felix", "Mila", "Theo", "Ines", "Leon"]),
    "race": ("{n} completed a {v} in {w}.", "I finished a {v} yesterday in {w}, legs are dead.",
             "When did {n} run the {v}?", 2,
             ["half marathon", "10k charity run", "triathlon", "trail ultramarathon", "5k park run"],
             ["under two hours", "a personal best", "pouring rain", "fancy dress"]),
    "food": ("{n}'s favourite dish is {v}, which {w} used to cook.", "Nothing beats {v}, {w} used to make it.",
             "Who used to make {n}'s favourite {v}?", 4,
             ["mushroom risotto", "lamb tagine", "pierogi", "pho", "shakshuka", "paella", "dumplings"],
             ["their grandmother", "their father", "a childhood friend", "their first flatmate"]),
    "show": ("{n} is binge-watching a {v} series on {w}.", "I'm binge-watching a {v} series, I watch it {w}.",
             "When does {n} watch the {v} show?", 4,
             ["Scandinavian crime", "nature documentary", "cooking competition", "space opera", "period drama"],
             ["late at night", "on the train", "with their kids", "during lunch"]),
    "kid": ("{n}'s son started {v} lessons with {w}.", "My son just started {v} with {w}, he loves it.",
            "Who does {n}'s son have {v} lessons with?", 4,
            ["chess", "violin", "judo", "football", "swimming", "drawing"],
            ["a neighbour", "his best friend", "a former champion", "a strict coach"]),
    "concert": ("{n} went to a {v} concert at {w}.", "Went to a {v} concert at {w} last night, amazing.",
                "When did {n} see the {v} gig?", 2,
                ["jazz", "folk", "heavy metal", "opera", "techno", "bluegrass"],
                ["an old church", "a festival", "a tiny bar", "the stadium"]),
    "goal": ("{n} wants to {v} someday, inspired by {w}.", "One day I want to {v}, {w} inspired me.",
             "What made {n} dream of trying to {v}?", 3,
             ["sail around the world", "open a small bookshop", "climb Kilimanjaro", "write a cookbook",
              "learn to fly a glider"],
             ["a podcast", "their uncle", "a childhood book", "a trip abroad"]),
}
SMALL_TALK = ["Haha, that's great to hear.", "How was your week?", "I know what you mean.", "Let's catch up soon!",
              "That sounds like a lot of fun.", "Oh wow, really?", "Take care of yourself."]


def session_dates(r: random.Random, n: int) -> list[datetime]:
    start = datetime(2023, 1, 1) + timedelta(days=r.randrange(0, 200))
    out, t = [], start
    for _ in range(n):
        t += timedelta(days=r.randrange(5, 40), hours=r.randrange(8, 21), minutes=r.randrange(0, 60))
        out.append(t)
    return out


def locomo_date(t: datetime) -> str:
    hour = t.strftime("%I").lstrip("0")
    return f"{hour}:{t:%M} {t:%p}".lower().replace("am", "am").replace("pm", "pm") + f" on {t.day} {t:%B}, {t.year}"


def make_sample(r: random.Random, a: str, b: str, idx: int) -> dict:
    sessions = r.randrange(10, 14)
    dates = session_dates(r, sessions)
    conversation: dict = {"speaker_a": a, "speaker_b": b}
    observation: dict = {}
    qa: list[dict] = []
    lived: dict[str, dict[str, list[tuple[str, str, str]]]] = {a: {}, b: {}}  # person -> kind -> (value, dia, fact)
    for s in range(1, sessions + 1):
        turns, obs = [], {a: [], b: []}
        for _ in range(r.randrange(8, 11)):
            who = r.choice([a, b])
            other = b if who == a else a
            dia = f"D{s}:{len(turns) + 1}"
            kind = r.choice(list(EVENTS))
            fact_t, say_t, _q, _c, cues, details = EVENTS[kind]
            done = lived[who].setdefault(kind, [])
            repeatable = kind in {"city", "job", "trip", "concert", "book", "show", "course", "sport"}
            if done and not repeatable or len(done) >= 2:
                turns.append({"speaker": who, "dia_id": dia, "text": r.choice(SMALL_TALK)})
                continue
            cue = r.choice([v for v in cues if v not in {d[0] for d in done}])
            detail = r.choice(details)
            fact = fact_t.format(n=who, v=cue, w=detail)
            turns.append({"speaker": who, "dia_id": dia, "text": say_t.format(v=cue, w=detail)})
            obs[who].append([fact, dia])
            done.append((cue, dia, fact, detail, locomo_date(dates[s - 1])))
            if r.random() < 0.3:  # the other person answers with small talk
                turns.append({"speaker": other, "dia_id": f"D{s}:{len(turns) + 1}", "text": r.choice(SMALL_TALK)})
        conversation[f"session_{s}"] = turns
        conversation[f"session_{s}_date_time"] = locomo_date(dates[s - 1])
        observation[f"session_{s}_observation"] = obs
    for who, kinds in lived.items():
        for kind, done in kinds.items():
            _f, _s, question, category, _c, _d = EVENTS[kind]
            for cue, dia, _fact, detail, when in done:
                qa.append({"question": question.format(n=who, v=cue, w=detail),
                           "answer": when if category == 2 else detail, "evidence": [dia], "category": category})
        hobbies = [k for k in ("craft", "sport", "instrument", "garden") if k in kinds]
        if len(hobbies) >= 2:  # multi-hop: every piece is needed
            pieces = " and ".join(kinds[k][-1][0] for k in hobbies[:2])
            qa.append({"question": f"Which of {who}'s pastimes, {pieces}, did they pick up first?",
                       "answer": kinds[hobbies[0]][-1][0],
                       "evidence": [kinds[k][-1][1] for k in hobbies[:2]], "category": 1})
        if "city" in kinds and len(kinds["city"]) == 2:
            qa.append({"question": f"Where did {who} live before moving to {kinds['city'][1][0]}?",
                       "answer": kinds["city"][0][0], "evidence": [d[1] for d in kinds["city"]], "category": 1})
        qa.append({"question": f"What is the name of {who}'s pet dragon?", "answer": "", "evidence": [],
                   "adversarial_answer": "none", "category": 5})
    return {"sample_id": f"synthetic-{idx}", "conversation": conversation, "observation": observation, "qa": qa}


def main() -> None:
    r = random.Random(20260512)
    names = NAMES[:]
    r.shuffle(names)
    samples = [make_sample(r, names[2 * i], names[2 * i + 1], i) for i in range(len(names) // 2)]
    OUT.write_text(json.dumps(samples, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    facts = sum(len(v) for s in samples for o in s["observation"].values() for v in o.values())
    questions = sum(1 for s in samples for q in s["qa"] if q["category"] in (1, 2, 3, 4))
    print(f"wrote {OUT} ({len(samples)} conversations, {facts} observations, {questions} questions)")


if __name__ == "__main__":
    main()
