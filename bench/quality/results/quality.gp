set terminal pngcairo size 1200,480 font ',10'
set output 'bench/quality/results/quality.png'
set multiplot layout 1,2 title 'stories260K on TinyStories-val: 32 windows x 512 tokens, prompt 256; error bars = standard error over windows'
set grid
set xlabel 'budget k / prompt length'
set xrange [0:1]
set key top right
set ylabel 'NLL - full-cache NLL (nats/token; full cache: 1.390)'
plot 0 title 'full cache' lw 2 dt 2 lc 'black', 'bench/quality/results/quality_plot.dat' index 0 using 1:8:9 with yerrorlines lt 1 title 'keyformer' noenhanced, 'bench/quality/results/quality_plot.dat' index 1 using 1:8:9 with yerrorlines lt 2 title 'keyformer-nonoise' noenhanced, 'bench/quality/results/quality_plot.dat' index 2 using 1:8:9 with yerrorlines lt 3 title 'h2o' noenhanced, 'bench/quality/results/quality_plot.dat' index 3 using 1:8:9 with yerrorlines lt 4 title 'streaming' noenhanced, 'bench/quality/results/quality_plot.dat' index 4 using 1:8:9 with yerrorlines lt 5 title 'window' noenhanced, 'bench/quality/results/quality_plot.dat' index 5 using 1:8:9 with yerrorlines lt 6 title 'tova' noenhanced, 'bench/quality/results/quality_plot.dat' index 6 using 1:8:9 with yerrorlines lt 7 title 'snapkv' noenhanced
set ylabel 'KL(full || policy) (nats)'
set logscale y
plot 'bench/quality/results/quality_plot.dat' index 0 using 1:4:5 with yerrorlines lt 1 title 'keyformer' noenhanced, 'bench/quality/results/quality_plot.dat' index 1 using 1:4:5 with yerrorlines lt 2 title 'keyformer-nonoise' noenhanced, 'bench/quality/results/quality_plot.dat' index 2 using 1:4:5 with yerrorlines lt 3 title 'h2o' noenhanced, 'bench/quality/results/quality_plot.dat' index 3 using 1:4:5 with yerrorlines lt 4 title 'streaming' noenhanced, 'bench/quality/results/quality_plot.dat' index 4 using 1:4:5 with yerrorlines lt 5 title 'window' noenhanced, 'bench/quality/results/quality_plot.dat' index 5 using 1:4:5 with yerrorlines lt 6 title 'tova' noenhanced, 'bench/quality/results/quality_plot.dat' index 6 using 1:4:5 with yerrorlines lt 7 title 'snapkv' noenhanced
unset multiplot
